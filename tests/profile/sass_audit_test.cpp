// The SASS audit on a listing written by hand in nvdisasm's form: a consumer
// role behind setmaxnreg 240 with an MMA loop whose wait retries out of line,
// a producer behind setmaxnreg 24 with a loop of its own, and the padding
// after the last EXIT.
#include "profile/sass_audit.h"

#include <gtest/gtest.h>

namespace attune::profile {
namespace {

constexpr const char* kListing = R"(
//--------------------- .text.kernel --------------------------
.text.kernel:
        /*0000*/                   S2R R10, SR_TID.X ;
        /*0010*/                   ISETP.NE.AND P0, PT, R10, RZ, PT ;
        /*0020*/               @P0 BRA `(.L_x_3) ;
        /*0030*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0 ;
        /*0040*/                   MOV R20, RZ ;
.L_x_0:
        /*0050*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0060*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0070*/                   FMNMX R21, R24, R25, !PT ;
        /*0080*/                   MUFU.EX2 R22, R21 ;
        /*0090*/                   ISETP.GE.AND.EX P1, PT, R23, RZ, PT, P1 ;
        /*00a0*/              @!P1 BRA `(.L_x_5) ;
.L_x_1:
        /*00b0*/                   IADD3 R20, R20, 0x1, RZ ;
        /*00c0*/                   ISETP.LT.AND P2, PT, R20, 0x8, PT ;
        /*00d0*/               @P2 BRA `(.L_x_0) ;
        /*00e0*/                   STL [R1], R30 ;
        /*00f0*/                   EXIT ;
.L_x_3:
        /*0100*/                   USETMAXREG.DEALLOC.CTAPOOL 0x18 ;
        /*0110*/                   MOV R3, RZ ;
.L_x_4:
        /*0120*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0130*/                   ISETP.LT.AND P3, PT, R3, 0x4, PT ;
        /*0140*/               @P3 BRA `(.L_x_4) ;
        /*0150*/                   EXIT ;
.L_x_5:
        /*0160*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4+0x8], R200 ;
        /*0170*/              @!P1 BRA `(.L_x_5) ;
        /*0180*/                   LDL R31, [R1] ;
        /*0190*/                   BRA `(.L_x_1) ;
.L_x_6:
        /*01a0*/                   BRA `(.L_x_6);
)";

// A region's budget, size, highest register and spills, in one comparison.
std::vector<int> summary(const SassRegion& r) {
  return {r.register_limit, r.instructions, r.highest_register, r.spill_stores, r.spill_loads};
}

TEST(SassAuditTest, RegionsFollowTheSetmaxnregThatDominatesThem) {
  const SassAudit audit = audit_sass(kListing);
  ASSERT_EQ(audit.regions.size(), 3u);
  // The entry: the role test and the padding.
  EXPECT_EQ(summary(audit.regions[0]), (std::vector<int>{0, 4, 10, 0, 0}));
  // The consumer, with its wait retry placed at the end of the function.
  EXPECT_EQ(summary(audit.regions[1]), (std::vector<int>{240, 17, 200, 1, 1}));
  EXPECT_EQ(audit.regions[1].first_address, 0x30);
  // The producer: never the consumer's registers.
  EXPECT_EQ(summary(audit.regions[2]), (std::vector<int>{24, 6, 3, 0, 0}));
  EXPECT_EQ(audit.regions[0].function, "kernel");
}

TEST(SassAuditTest, OnlyNaturalLoopsWithAnMmaAreReported) {
  const SassAudit audit = audit_sass(kListing);
  // The producer's loop, the retry's self loop and the padding have no MMA;
  // the forward branch to the producer is no loop at all.
  ASSERT_EQ(audit.loops.size(), 1u);
  const SassLoop& loop = audit.loops[0];
  EXPECT_EQ(loop.begin_address, 0x50);
  EXPECT_EQ(loop.end_address, 0x190);  // the retry is on the loop's path
  EXPECT_EQ(loop.instructions, 13);
  EXPECT_EQ(loop.mma, 2);
  EXPECT_DOUBLE_EQ(loop.instructions_per_mma, 6.5);
  EXPECT_EQ(loop.mma_shapes, (std::map<std::string, int>{{"HGMMA.64x128x16.F32.BF16", 2}}));
  EXPECT_EQ(loop.classes,
            (std::map<std::string, int>{{"BAR", 1}, {"FMNMX", 1}, {"ISETP.EX", 1}, {"LDL", 1}, {"MUFU.EX2", 1}}));
}

TEST(SassAuditTest, AListingWithoutSetmaxnregIsOneRegion) {
  const SassAudit audit = audit_sass(R"(
.text.ampere:
        /*0000*/                   MOV R4, RZ ;
.L_x_0:
        /*0010*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0020*/                   FFMA R5, R8, R9, -R6 ;
        /*0030*/               @P0 BRA `(.L_x_0) ;
        /*0040*/                   EXIT ;
)");
  ASSERT_EQ(audit.regions.size(), 1u);
  EXPECT_EQ(audit.regions[0].highest_register, 16);
  ASSERT_EQ(audit.loops.size(), 1u);
  EXPECT_EQ(audit.loops[0].instructions, 3);
  EXPECT_EQ(audit.loops[0].classes, (std::map<std::string, int>{{"FFMA", 1}}));
  EXPECT_EQ(audit.loops[0].inner_mma_loops, 0);
}

// A persistent kernel: a tile loop around the key loop. Both are reported;
// the outer one says it holds the inner one, so a reader (and
// cli.hopper_audit) takes the main loop's count from the inner.
TEST(SassAuditTest, AnOuterLoopNamesTheMmaLoopsItHolds) {
  const SassAudit audit = audit_sass(R"(
.text.persistent:
        /*0000*/                   MOV R4, RZ ;
.L_x_0:
        /*0010*/                   IADD3 R4, R4, 0x1, RZ ;
.L_x_1:
        /*0020*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0030*/               @P1 BRA `(.L_x_1) ;
        /*0040*/                   STG.E [R2.64], R8 ;
        /*0050*/               @P0 BRA `(.L_x_0) ;
        /*0060*/                   EXIT ;
)");
  ASSERT_EQ(audit.loops.size(), 2u);
  EXPECT_EQ(audit.loops[0].begin_address, 0x10);
  EXPECT_EQ(audit.loops[0].instructions, 5);
  EXPECT_EQ(audit.loops[0].inner_mma_loops, 1);
  EXPECT_EQ(audit.loops[1].begin_address, 0x20);
  EXPECT_EQ(audit.loops[1].instructions, 2);
  EXPECT_EQ(audit.loops[1].inner_mma_loops, 0);
}

}  // namespace
}  // namespace attune::profile
