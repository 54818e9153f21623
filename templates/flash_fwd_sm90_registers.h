// The registers flash_fwd_sm90's consumers use, measured on the compiled
// variants (sm_90a, bf16; SASS audit per setmaxnreg region) by
// tools/sm90_registers.py, which writes this file: do not edit by hand.
// FlashFwdSm90Tunables::valid draws the variant space from it.
#pragma once

namespace attune {

struct Sm90RegisterMeasurement {
  int head_dim;
  int consumers;
  int block_n;
  int overlap;
  int highest_register;  // in the consumers' region
  int spills;            // STL and LDL instructions, every region
};

// {head dim, consumers, key tile, overlap, highest register, spills}: the variant
inline constexpr Sm90RegisterMeasurement kSm90Registers[] = {
    {64, 1, 64, 0, 108, 0},      // d64.bm64.bn64.st2.pp0.ov0.ra0.ts1.sc1
    {64, 1, 64, 1, 108, 0},      // d64.bm64.bn64.st2.pp0.ov1.ra0.ts1.sc1
    {64, 1, 80, 0, 116, 0},      // d64.bm64.bn80.st2.pp0.ov0.ra0.ts1.sc2
    {64, 1, 80, 1, 123, 0},      // d64.bm64.bn80.st2.pp0.ov1.ra0.ts1.sc2
    {64, 1, 128, 0, 154, 0},     // d64.bm64.bn128.st2.pp0.ov0.ra0.ts1.sc1
    {64, 1, 128, 1, 165, 0},     // d64.bm64.bn128.st2.pp0.ov1.ra0.ts1.sc0
    {64, 1, 176, 0, 200, 0},     // d64.bm64.bn176.st2.pp0.ov0.ra0.ts1.sc2
    {64, 1, 176, 1, 217, 0},     // d64.bm64.bn176.st2.pp0.ov1.ra0.ts1.sc0
    {64, 2, 64, 0, 115, 0},      // d64.bm128.bn64.st2.pp1.ov0.ra0.ts1.sc1
    {64, 2, 64, 1, 110, 0},      // d64.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc1
    {64, 2, 80, 0, 133, 0},      // d64.bm128.bn80.st2.pp1.ov0.ra0.ts1.sc1
    {64, 2, 80, 1, 122, 0},      // d64.bm128.bn80.st2.pp1.ov1.ra0.ts1.sc2
    {64, 2, 128, 0, 175, 0},     // d64.bm128.bn128.st2.pp1.ov0.ra0.ts1.sc1
    {64, 2, 128, 1, 163, 0},     // d64.bm128.bn128.st2.pp1.ov1.ra0.ts1.sc0
    {64, 2, 176, 0, 199, 0},     // d64.bm128.bn176.st2.pp1.ov0.ra0.ts1.sc0
    {64, 2, 176, 1, 221, 0},     // d64.bm128.bn176.st2.pp1.ov1.ra0.ts1.sc2
    {64, 3, 64, 0, 115, 0},      // d64.bm192.bn64.st2.pp0.ov0.ra0.ts1.sc1
    {64, 3, 64, 1, 109, 0},      // d64.bm192.bn64.st2.pp0.ov1.ra0.ts1.sc1
    {64, 3, 80, 0, 127, 0},      // d64.bm192.bn80.st2.pp0.ov0.ra0.ts1.sc1
    {64, 3, 80, 1, 121, 0},      // d64.bm192.bn80.st2.pp0.ov1.ra0.ts1.sc1
    {64, 3, 128, 0, 152, 0},     // d64.bm192.bn128.st2.pp0.ov0.ra0.ts1.sc1
    {64, 3, 128, 1, 157, 0},     // d64.bm192.bn128.st2.pp0.ov1.ra0.ts1.sc0
    {128, 1, 64, 0, 181, 0},     // d128.bm64.bn64.st2.pp0.ov0.ra0.ts1.sc2
    {128, 1, 64, 1, 183, 0},     // d128.bm64.bn64.st2.pp0.ov1.ra0.ts1.sc2
    {128, 1, 80, 0, 181, 0},     // d128.bm64.bn80.st2.pp0.ov0.ra0.ts1.sc1
    {128, 1, 80, 1, 183, 0},     // d128.bm64.bn80.st2.pp0.ov1.ra0.ts1.sc2
    {128, 1, 128, 0, 205, 0},    // d128.bm64.bn128.st2.pp0.ov0.ra0.ts1.sc1
    {128, 1, 128, 1, 216, 0},    // d128.bm64.bn128.st2.pp0.ov1.ra0.ts1.sc1
    {128, 1, 176, 0, 221, 0},    // d128.bm64.bn176.st2.pp0.ov0.ra0.ts1.sc1
    {128, 1, 176, 1, 251, 0},    // d128.bm64.bn176.st2.pp0.ov1.ra0.ts1.sc2
    {128, 2, 64, 0, 179, 0},     // d128.bm128.bn64.st2.pp1.ov0.ra0.ts1.sc1
    {128, 2, 64, 1, 179, 0},     // d128.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc1
    {128, 2, 80, 0, 179, 0},     // d128.bm128.bn80.st2.pp1.ov0.ra0.ts1.sc1
    {128, 2, 80, 1, 179, 0},     // d128.bm128.bn80.st2.pp1.ov1.ra0.ts1.sc1
    {128, 2, 128, 0, 197, 0},    // d128.bm128.bn128.st2.pp1.ov0.ra0.ts1.sc2
    {128, 2, 128, 1, 203, 0},    // d128.bm128.bn128.st2.pp1.ov1.ra0.ts1.sc0
    {128, 2, 176, 0, 224, 0},    // d128.bm128.bn176.st2.pp1.ov0.ra0.ts1.sc2
    {128, 2, 176, 1, 237, 0},    // d128.bm128.bn176.st2.pp1.ov1.ra0.ts1.sc0
    {128, 3, 64, 0, 152, 0},     // d128.bm192.bn64.st2.pp0.ov0.ra0.ts1.sc0
    {128, 3, 64, 1, 152, 0},     // d128.bm192.bn64.st2.pp0.ov1.ra0.ts1.sc0
    {128, 3, 80, 0, 152, 0},     // d128.bm192.bn80.st2.pp0.ov0.ra0.ts1.sc0
    {128, 3, 80, 1, 152, 0},     // d128.bm192.bn80.st2.pp0.ov1.ra0.ts1.sc0
    {128, 3, 128, 0, 157, 0},    // d128.bm192.bn128.st2.pp0.ov0.ra0.ts1.sc0
    {128, 3, 128, 1, 157, 261},  // d128.bm192.bn128.st2.pp0.ov1.ra0.ts1.sc1
    {256, 1, 64, 0, 243, 0},     // d256.bm64.bn64.st2.pp0.ov0.ra0.ts0.sc2
    {256, 1, 64, 1, 243, 0},     // d256.bm64.bn64.st2.pp0.ov1.ra0.ts0.sc2
    {256, 1, 80, 0, 243, 0},     // d256.bm64.bn80.st2.pp0.ov0.ra0.ts0.sc1
    {256, 1, 80, 1, 243, 0},     // d256.bm64.bn80.st2.pp0.ov1.ra0.ts0.sc1
    {256, 1, 128, 0, 249, 0},    // d256.bm64.bn128.st2.pp0.ov0.ra0.ts0.sc1
    {256, 1, 128, 1, 250, 0},    // d256.bm64.bn128.st2.pp0.ov1.ra0.ts0.sc1
    {256, 1, 176, 0, 252, 0},    // d256.bm64.bn176.st2.pp0.ov0.ra0.ts0.sc0
    {256, 1, 176, 1, 252, 290},  // d256.bm64.bn176.st2.pp0.ov1.ra0.ts0.sc1
    {256, 2, 64, 0, 229, 0},     // d256.bm128.bn64.st2.pp1.ov0.ra0.ts1.sc1
    {256, 2, 64, 1, 228, 0},     // d256.bm128.bn64.st2.pp1.ov1.ra0.ts1.sc0
    {256, 2, 80, 0, 227, 0},     // d256.bm128.bn80.st2.pp1.ov0.ra0.ts1.sc0
    {256, 2, 80, 1, 228, 0},     // d256.bm128.bn80.st2.pp1.ov1.ra0.ts1.sc0
    {256, 2, 128, 0, 236, 6},    // d256.bm128.bn128.st2.pp1.ov0.ra0.ts1.sc0
    {256, 2, 128, 1, 237, 120},  // d256.bm128.bn128.st2.pp1.ov1.ra0.ts1.sc1
    {256, 2, 176, 0, 237, 708},  // d256.bm128.bn176.st2.pp1.ov0.ra0.ts1.sc2
    {256, 2, 176, 1, 235, 990},  // d256.bm128.bn176.st2.pp1.ov1.ra0.ts1.sc2
};

}  // namespace attune
