// The C API's problem struct as C callers fill it, converted without a
// runtime: out-of-range enum values (any int a C caller stores) and length
// arrays whose counts would overflow are refused with the field named.
#include "runtime/c_problem.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/error.h"

namespace attune {
namespace {

attune_problem valid() {
  attune_problem c{};
  c.dtype = ATTUNE_DTYPE_BF16;
  c.batch = 1;
  c.seqlen_q = 4;
  c.seqlen_k = 6;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim_k = 8;
  c.head_dim_v = 8;
  c.mask = ATTUNE_MASK_NONE;
  c.window_left = c.window_right = -1;
  return c;
}

std::string rejection(const attune_problem& c) {
  try {
    (void)problem_from_c(c);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}

// Stores an int in an enum field the way C code can.
template <class Enum>
void store_int(Enum& field, int value) {
  std::memcpy(&field, &value, sizeof value);
}

TEST(CProblemTest, AValidStructConverts) {
  const AttentionProblem p = problem_from_c(valid());
  EXPECT_EQ(p.heads_q, 2);
  EXPECT_EQ(p.group_size(), 2);
}

// Found by fuzz/problem_fuzzer: loading these as the C++ enums was undefined.
TEST(CProblemTest, EnumFieldsOutsideTheirValuesAreRefused) {
  attune_problem c = valid();
  store_int(c.dtype, -1);
  EXPECT_NE(rejection(c).find("dtype: got -1"), std::string::npos) << rejection(c);
  c = valid();
  store_int(c.mask, 12345);
  EXPECT_NE(rejection(c).find("mask: got 12345"), std::string::npos) << rejection(c);
}

TEST(CProblemTest, CountsThatWouldOverflowAreRefusedBeforeAnyArrayIsRead) {
  attune_problem c = valid();
  c.batch = INT64_MAX;
  const int32_t lengths[2] = {0, 0};
  c.seqlens_k = lengths;  // would be read for `batch` entries
  EXPECT_NE(rejection(c).find("batch: got 9223372036854775807"), std::string::npos) << rejection(c);
  c = valid();
  const int32_t table[1] = {0};
  c.block_table = table;
  c.page_size = 16;
  c.num_pages = 1;
  c.max_pages = INT64_MAX;
  EXPECT_NE(rejection(c).find("max_pages"), std::string::npos) << rejection(c);
}

}  // namespace
}  // namespace attune
