#include "core/version.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attune {
namespace {

TEST(VersionTest, ThisBuildsVersionParses) {
  const auto parts = parse_version(attune_version());
  ASSERT_TRUE(parts.has_value()) << attune_version();
  EXPECT_EQ(parts->size(), 3u);
}

TEST(VersionTest, ParsesDottedNumbersOnly) {
  EXPECT_EQ(parse_version("0.10.2"), (std::vector<long>{0, 10, 2}));
  EXPECT_EQ(parse_version("7"), (std::vector<long>{7}));
  for (const std::string bad : {"", ".", "1.", ".1", "1..2", "1.2a", "v1.2", "1.-2", " 1.2", "1.2 "}) {
    EXPECT_FALSE(parse_version(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(VersionTest, OrdersComponentByComponentNotAsText) {
  const auto v = [](const char* text) { return *parse_version(text); };
  EXPECT_TRUE(version_less(v("0.9.0"), v("0.10.0")));  // text order would say otherwise
  EXPECT_TRUE(version_less(v("0.1.0"), v("0.1.1")));
  EXPECT_TRUE(version_less(v("1.2"), v("1.2.1")));
  EXPECT_FALSE(version_less(v("1.2"), v("1.2.0")));
  EXPECT_FALSE(version_less(v("1.2.0"), v("1.2")));
  EXPECT_FALSE(version_less(v("2.0.0"), v("1.99.99")));
  EXPECT_FALSE(version_less(v("1.0.0"), v("1.0.0")));
}

}  // namespace
}  // namespace attune
