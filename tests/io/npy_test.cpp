#include "io/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace attune::npy {
namespace {

namespace fs = std::filesystem;

// ---- helpers ----

std::string read_file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Little-endian (or, with big_endian, byte-swapped) bytes of some values.
template <typename T>
std::string raw_bytes(const std::vector<T>& values, bool big_endian = false) {
  std::string out;
  for (const T& v : values) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    if (big_endian == (std::endian::native == std::endian::little)) std::reverse(bytes, bytes + sizeof(T));
    out.append(bytes, sizeof(T));
  }
  return out;
}

// A .npy file built by hand: `major`.0 preamble, `dict` padded with spaces to
// a 64-byte boundary plus '\n' (unless `pad` is false: then used verbatim).
std::string npy_file(const std::string& dict, const std::string& data, int major = 1, bool pad = true) {
  const std::size_t length_field = major == 1 ? 2 : 4;
  std::string header = dict;
  if (pad) {
    const std::size_t unpadded = 8 + length_field + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
  }
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < length_field; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string dict_for(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

// The message of the IoError that `fn` throws ("" and a test failure if none).
std::string io_error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const IoError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected IoError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected IoError, nothing was thrown";
  return "";
}

::testing::AssertionResult contains_all(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) {
    if (message.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "message \"" << message << "\" lacks \"" << part << "\"";
    }
  }
  if (message.find('\n') != std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << message << "\" is not one line";
  }
  return ::testing::AssertionSuccess();
}

uint32_t float_bits(float f) { return std::bit_cast<uint32_t>(f); }

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("attune_npy_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Writes `bytes` to a file in the test directory and returns its path.
  fs::path file_with(const std::string& bytes, const std::string& name = "a.npy") {
    const fs::path path = dir_ / name;
    write_file_bytes(path, bytes);
    return path;
  }

  // Names in the test directory (to check for leftover temporary files).
  std::vector<std::string> directory_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// ---- round trips ----

const std::vector<std::vector<int64_t>> kShapes = {{}, {1}, {5}, {2, 3}, {2, 3, 4}, {0}, {3, 0, 2}, {1, 1, 1, 7}};

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

TEST_F(NpyTest, RoundTripFloat32) {
  for (const auto& shape : kShapes) {
    SCOPED_TRACE("shape rank " + std::to_string(shape.size()) + ", size " + std::to_string(product(shape)));
    std::vector<float> data(static_cast<std::size_t>(product(shape)));
    const float specials[] = {-0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::max()};
    for (std::size_t i = 0; i < data.size(); ++i) {
      data[i] = i < std::size(specials) ? specials[i] : static_cast<float>(i) * 0.37f - 3.0f;
    }
    const fs::path path = dir_ / "f32.npy";
    write(path, shape, data);
    const Array array = read(path);
    EXPECT_EQ(array.type, ElementType::kFloat32);
    EXPECT_EQ(array.shape, shape);
    EXPECT_EQ(array.size(), product(shape));
    ASSERT_EQ(array.bytes.size(), data.size() * sizeof(float));
    const std::vector<float> back = array.to_float32();
    ASSERT_EQ(back.size(), data.size());
    for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(float_bits(back[i]), float_bits(data[i])) << "at " << i;
  }
}

TEST_F(NpyTest, RoundTripInt32) {
  for (const auto& shape : kShapes) {
    SCOPED_TRACE("shape rank " + std::to_string(shape.size()) + ", size " + std::to_string(product(shape)));
    std::vector<int32_t> data(static_cast<std::size_t>(product(shape)));
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>(i * 1000003) - 7;
    if (data.size() >= 2) {
      data[0] = std::numeric_limits<int32_t>::min();
      data[1] = std::numeric_limits<int32_t>::max();
    }
    const fs::path path = dir_ / "i32.npy";
    write(path, shape, data);
    const Array array = read(path);
    EXPECT_EQ(array.type, ElementType::kInt32);
    EXPECT_EQ(array.shape, shape);
    EXPECT_EQ(array.to_int32("i32.npy"), data);
    const std::vector<float> as_float = array.to_float32();
    for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(as_float[i], static_cast<float>(data[i]));
  }
}

TEST_F(NpyTest, ScalarHasSizeOne) {
  const float value = 2.5f;
  write(dir_ / "s.npy", std::vector<int64_t>{}, std::span<const float>(&value, 1));
  const Array array = read(dir_ / "s.npy");
  EXPECT_TRUE(array.shape.empty());
  EXPECT_EQ(array.size(), 1);
  EXPECT_EQ(array.to_float32(), std::vector<float>{2.5f});
  EXPECT_NE(read_file_bytes(dir_ / "s.npy").find("'shape': ()"), std::string::npos);
}

TEST_F(NpyTest, WriteReplacesExistingFileAndLeavesNoTemporaries) {
  const fs::path path = dir_ / "x.npy";
  write(path, std::vector<int64_t>{4}, std::vector<float>{1, 2, 3, 4});
  write(path, std::vector<int64_t>{2}, std::vector<int32_t>{7, 8});
  const Array array = read(path);
  EXPECT_EQ(array.type, ElementType::kInt32);
  EXPECT_EQ(array.shape, std::vector<int64_t>{2});
  EXPECT_EQ(array.to_int32("x"), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"x.npy"});
}

TEST_F(NpyTest, WriteRelativePath) {
  const fs::path old_cwd = fs::current_path();
  fs::current_path(dir_);
  write("rel.npy", std::vector<int64_t>{1}, std::vector<float>{1.5f});
  fs::current_path(old_cwd);
  EXPECT_EQ(read(dir_ / "rel.npy").to_float32(), std::vector<float>{1.5f});
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"rel.npy"});
}

// ---- header layout of written files ----

struct Layout {
  int major = 0;
  std::size_t data_offset = 0;
  std::string header;
};

Layout layout_of(const std::string& bytes) {
  Layout layout;
  if (bytes.size() < 12 || bytes.compare(0, 6, std::string("\x93NUMPY", 6)) != 0) return layout;
  layout.major = bytes[6];
  const std::size_t field = layout.major == 1 ? 2 : 4;
  std::size_t length = 0;
  for (std::size_t i = field; i-- > 0;) length = (length << 8) | static_cast<unsigned char>(bytes[8 + i]);
  layout.data_offset = 8 + field + length;
  layout.header = bytes.substr(8 + field, length);
  return layout;
}

TEST_F(NpyTest, WrittenHeaderIsAlignedTo64Bytes) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 3}, {1, 2, 3, 4, 5, 6, 7, 8}, {1000000000, 0}};
  for (const auto& shape : shapes) {
    const std::vector<float> data(static_cast<std::size_t>(product(shape)), 1.0f);
    write(dir_ / "a.npy", shape, data);
    const std::string bytes = read_file_bytes(dir_ / "a.npy");
    const Layout layout = layout_of(bytes);
    SCOPED_TRACE(layout.header);
    EXPECT_EQ(layout.major, 1);
    EXPECT_EQ(bytes[7], '\0');
    EXPECT_EQ(layout.data_offset % 64, 0u);
    ASSERT_FALSE(layout.header.empty());
    EXPECT_EQ(layout.header.back(), '\n');
    EXPECT_NE(layout.header.find("'descr': '<f4'"), std::string::npos);
    EXPECT_NE(layout.header.find("'fortran_order': False"), std::string::npos);
    EXPECT_EQ(bytes.size() - layout.data_offset, data.size() * 4);
  }
  write(dir_ / "i.npy", std::vector<int64_t>{5}, std::vector<int32_t>(5));
  const Layout layout = layout_of(read_file_bytes(dir_ / "i.npy"));
  EXPECT_EQ(layout.data_offset % 64, 0u);
  EXPECT_NE(layout.header.find("'descr': '<i4'"), std::string::npos);
  EXPECT_NE(layout.header.find("'shape': (5,)"), std::string::npos);
}

TEST_F(NpyTest, HugeHeaderUsesVersion2) {
  // 30000 dimensions of 1: the header no longer fits a u16 length.
  const std::vector<int64_t> shape(30000, 1);
  write(dir_ / "big.npy", shape, std::vector<float>{42.0f});
  const std::string bytes = read_file_bytes(dir_ / "big.npy");
  const Layout layout = layout_of(bytes);
  EXPECT_EQ(layout.major, 2);
  EXPECT_EQ(layout.data_offset % 64, 0u);
  EXPECT_GT(layout.header.size(), 65535u);
  const Array array = read(dir_ / "big.npy");
  EXPECT_EQ(array.shape, shape);
  EXPECT_EQ(array.to_float32(), std::vector<float>{42.0f});
}

// ---- write errors ----

TEST_F(NpyTest, WriteShapeMismatchIsInvalidArgument) {
  const fs::path path = dir_ / "m.npy";
  try {
    write(path, std::vector<int64_t>{2, 3}, std::vector<float>(5));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains_all(e.what(), {"m.npy", "(2, 3)", "6 elements", "5"}));
  }
  EXPECT_THROW(write(path, std::vector<int64_t>{-1}, std::vector<int32_t>{}), InvalidArgument);
  EXPECT_THROW(write(path, std::vector<int64_t>{}, std::vector<int32_t>{}), InvalidArgument);
  EXPECT_THROW(write(path, std::vector<int64_t>{int64_t{1} << 62, 8}, std::vector<float>{}), InvalidArgument);
  EXPECT_TRUE(directory_entries().empty());
}

TEST_F(NpyTest, WriteIntoMissingDirectoryIsIoError) {
  const fs::path path = dir_ / "no_such_dir" / "x.npy";
  const std::string message = io_error_message([&] { write(path, std::vector<int64_t>{1}, std::vector<float>{1.0f}); });
  EXPECT_TRUE(contains_all(message, {path.string(), "No such file or directory"}));
  EXPECT_TRUE(directory_entries().empty());
}

TEST_F(NpyTest, FailedRenameRemovesTemporaryFile) {
  // The target is a non-empty directory, so the final rename fails.
  fs::create_directories(dir_ / "target.npy" / "child");
  const fs::path path = dir_ / "target.npy";
  const std::string message = io_error_message([&] {
    write(path, std::vector<int64_t>{2}, std::vector<int32_t>{1, 2});
  });
  EXPECT_TRUE(contains_all(message, {path.string(), "rename"}));
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"target.npy"});
}

// ---- reading hand-built files ----

TEST_F(NpyTest, ReadsEveryDtype) {
  struct Case {
    std::string descr;
    std::string data;
    ElementType type;
    std::vector<float> expected;
  };
  const std::vector<Case> cases = {
      {"<f2", raw_bytes<uint16_t>({0x3C00, 0xC000, 0x3800}), ElementType::kFloat16, {1.0f, -2.0f, 0.5f}},
      {"<f4", raw_bytes<float>({1.5f, -2.25f, 1e30f}), ElementType::kFloat32, {1.5f, -2.25f, 1e30f}},
      {"<f8",
       raw_bytes<double>({0.1, -3.0, 1e300}),
       ElementType::kFloat64,
       {0.1f, -3.0f, std::numeric_limits<float>::infinity()}},
      {"<i4", raw_bytes<int32_t>({-1, 0, 123456}), ElementType::kInt32, {-1.0f, 0.0f, 123456.0f}},
      {"<i8", raw_bytes<int64_t>({-5, int64_t{1} << 40, 7}), ElementType::kInt64, {-5.0f, 1099511627776.0f, 7.0f}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.descr);
    const Array array = read(file_with(npy_file(dict_for(c.descr, "(3,)"), c.data)));
    EXPECT_EQ(array.type, c.type);
    EXPECT_EQ(array.shape, std::vector<int64_t>{3});
    EXPECT_EQ(array.bytes.size(), c.data.size());
    EXPECT_EQ(array.to_float32(), c.expected);
  }
}

TEST_F(NpyTest, Float16ValuesAreExact) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<uint16_t, float>> cases = {
      {0x0000, 0.0f},
      {0x3C00, 1.0f},
      {0xC000, -2.0f},
      {0x0001, std::ldexp(1.0f, -24)},         // smallest subnormal
      {0x03FF, std::ldexp(1023.0f, -24)},      // largest subnormal
      {0x8001, -std::ldexp(1.0f, -24)},        // negative subnormal
      {0x0400, std::ldexp(1.0f, -14)},         // smallest normal
      {0x7BFF, 65504.0f},                      // largest finite
      {0x3555, 0.333251953125f},               // nearest half to 1/3
      {0x3BFF, 1.0f - std::ldexp(1.0f, -11)},  // largest below 1
      {0x7C00, inf},
      {0xFC00, -inf},
  };
  std::vector<uint16_t> bits;
  for (const auto& c : cases) bits.push_back(c.first);
  bits.push_back(0x8000);  // -0
  bits.push_back(0x7E00);  // quiet NaN
  bits.push_back(0xFE01);  // negative NaN with payload
  const Array array =
      read(file_with(npy_file(dict_for("<f2", "(" + std::to_string(bits.size()) + ",)"), raw_bytes<uint16_t>(bits))));
  ASSERT_EQ(array.type, ElementType::kFloat16);
  const std::vector<float> values = array.to_float32();
  ASSERT_EQ(values.size(), bits.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(float_bits(values[i]), float_bits(cases[i].second)) << "half 0x" << std::hex << cases[i].first;
  }
  EXPECT_EQ(values[cases.size()], 0.0f);
  EXPECT_TRUE(std::signbit(values[cases.size()]));
  EXPECT_TRUE(std::isnan(values[cases.size() + 1]));
  EXPECT_TRUE(std::isnan(values[cases.size() + 2]));
  EXPECT_TRUE(std::signbit(values[cases.size() + 2]));
}

TEST_F(NpyTest, ReadsBigEndian) {
  {
    const Array array =
        read(file_with(npy_file(dict_for(">f4", "(2, 2)"), raw_bytes<float>({1, -2, 3.5f, 1e-3f}, true))));
    EXPECT_EQ(array.type, ElementType::kFloat32);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(array.to_float32(), (std::vector<float>{1, -2, 3.5f, 1e-3f}));
  }
  {
    const Array array = read(file_with(npy_file(dict_for(">f2", "(2,)"), raw_bytes<uint16_t>({0x3C00, 0x0001}, true))));
    EXPECT_EQ(array.to_float32(), (std::vector<float>{1.0f, std::ldexp(1.0f, -24)}));
  }
  {
    const Array array = read(file_with(npy_file(dict_for(">f8", "(1,)"), raw_bytes<double>({-0.5}, true))));
    EXPECT_EQ(array.to_float32(), std::vector<float>{-0.5f});
  }
  {
    const Array array = read(file_with(npy_file(dict_for(">i4", "(2,)"), raw_bytes<int32_t>({-2, 0x01020304}, true))));
    EXPECT_EQ(array.to_int32("be"), (std::vector<int32_t>{-2, 0x01020304}));
  }
  {
    const Array array = read(file_with(npy_file(dict_for(">i8", "(1,)"), raw_bytes<int64_t>({-300}, true))));
    EXPECT_EQ(array.to_int32("be"), std::vector<int32_t>{-300});
  }
}

TEST_F(NpyTest, AcceptsPipeAndNativeByteOrderMarks) {
  EXPECT_EQ(read(file_with(npy_file(dict_for("|f4", "(1,)"), raw_bytes<float>({3.0f})))).to_float32(),
            std::vector<float>{3.0f});
  EXPECT_EQ(read(file_with(npy_file(dict_for("=i4", "(1,)"), raw_bytes<int32_t>({9})))).to_int32("n"),
            std::vector<int32_t>{9});
}

TEST_F(NpyTest, ReadsFormatVersions2And3) {
  for (const int major : {2, 3}) {
    SCOPED_TRACE(major);
    const std::string bytes = npy_file(dict_for("<i8", "(2, 1)"), raw_bytes<int64_t>({4, 5}), major);
    const Array array = read(file_with(bytes));
    EXPECT_EQ(array.type, ElementType::kInt64);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(array.to_int32("v"), (std::vector<int32_t>{4, 5}));
  }
}

TEST_F(NpyTest, ParsesHeaderVariations) {
  struct Case {
    std::string header;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", {6}},
      {"{'descr':'<f4','fortran_order':False,'shape':(2,3)}", {2, 3}},
      {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3, 2)}", {3, 2}},
      {"{'shape': ( 6 , ), 'fortran_order': False, 'descr': '<f4'}", {6}},
      {"  {  'descr' : '<f4' ,\n 'fortran_order' : False , 'shape' : ( 1 , 2 , 3 , ) , }  \n", {1, 2, 3}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6L,), }", {6}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", {6}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,6,1,1,1,)}", {1, 1, 6, 1, 1, 1}},
  };
  const std::string data = raw_bytes<float>({1, 2, 3, 4, 5, 6});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    const Array array = read(file_with(npy_file(c.header, data, 1, /*pad=*/false)));
    EXPECT_EQ(array.shape, c.shape);
    EXPECT_EQ(array.to_float32(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  }
  // Scalar and zero-size.
  EXPECT_TRUE(read(file_with(npy_file(dict_for("<f4", "()"), raw_bytes<float>({1})))).shape.empty());
  const Array empty = read(file_with(npy_file(dict_for("<f4", "(4, 0)"), "")));
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.to_float32().empty());
  // A zero dimension makes any other dimension harmless.
  const Array huge_empty = read(file_with(npy_file(dict_for("<f8", "(4611686018427387904, 16, 0)"), "")));
  EXPECT_EQ(huge_empty.size(), 0);
}

// ---- conversions ----

TEST_F(NpyTest, ToInt32ChecksRangeAndType) {
  const std::string in_range =
      raw_bytes<int64_t>({std::numeric_limits<int32_t>::min(), 0, std::numeric_limits<int32_t>::max()});
  EXPECT_EQ(read(file_with(npy_file(dict_for("<i8", "(3,)"), in_range))).to_int32("ok"),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 0, std::numeric_limits<int32_t>::max()}));

  const Array high = read(file_with(npy_file(dict_for("<i8", "(2,)"), raw_bytes<int64_t>({1, 3000000000})), "h.npy"));
  EXPECT_TRUE(contains_all(io_error_message([&] { (void)high.to_int32("seq_lens.npy"); }),
                           {"seq_lens.npy", "3000000000", "index 1", "int32", "2147483647"}));
  const Array low = read(file_with(npy_file(dict_for("<i8", "(1,)"), raw_bytes<int64_t>({-2147483649})), "l.npy"));
  EXPECT_TRUE(contains_all(io_error_message([&] { (void)low.to_int32("lo"); }), {"lo", "-2147483649", "int32"}));

  const Array f = read(file_with(npy_file(dict_for("<f4", "(1,)"), raw_bytes<float>({1.0f})), "f.npy"));
  EXPECT_EQ(io_error_message([&] { (void)f.to_int32("idx.npy"); }),
            "idx.npy: expected an integer array (int32 or int64), got float32");
  const Array h = read(file_with(npy_file(dict_for("<f2", "(1,)"), raw_bytes<uint16_t>({0})), "g.npy"));
  EXPECT_TRUE(contains_all(io_error_message([&] { (void)h.to_int32("x"); }), {"got float16"}));
}

TEST_F(NpyTest, InconsistentArrayIsRejected) {
  Array array;
  array.type = ElementType::kFloat32;
  array.shape = {3};
  array.bytes.resize(8);
  EXPECT_THROW((void)array.to_float32(), InvalidArgument);
}

TEST(NpyElementType, Names) {
  EXPECT_EQ(to_string(ElementType::kFloat16), "float16");
  EXPECT_EQ(to_string(ElementType::kFloat32), "float32");
  EXPECT_EQ(to_string(ElementType::kFloat64), "float64");
  EXPECT_EQ(to_string(ElementType::kInt32), "int32");
  EXPECT_EQ(to_string(ElementType::kInt64), "int64");
  EXPECT_EQ(element_size(ElementType::kFloat16), 2u);
  EXPECT_EQ(element_size(ElementType::kInt64), 8u);
}

// ---- read errors ----

TEST_F(NpyTest, MissingFile) {
  const fs::path path = dir_ / "Q.npy";
  EXPECT_TRUE(contains_all(io_error_message([&] { read(path); }), {path.string(), "No such file or directory"}));
}

TEST_F(NpyTest, DirectoryIsNotAFile) {
  EXPECT_TRUE(contains_all(io_error_message([&] { read(dir_); }), {dir_.string(), "Is a directory"}));
}

TEST_F(NpyTest, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: file permissions are not enforced";
  const fs::path path = file_with(npy_file(dict_for("<f4", "()"), raw_bytes<float>({1})));
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  EXPECT_TRUE(contains_all(io_error_message([&] { read(path); }), {path.string(), "Permission denied"}));
}

TEST_F(NpyTest, BadMagic) {
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with("")); }), {"a.npy", "not a .npy file", "empty"}));
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with("PK\x03\x04 this is a zip")); }),
                           {"a.npy", "not a .npy file", "magic", "PK\\x03\\x04"}));
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with("\x93NUM")); }), {"not a .npy file"}));
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(std::string("\x93NUMPY\x01", 7))); }),
                           {"truncated preamble", "found 7"}));
}

TEST_F(NpyTest, UnsupportedVersion) {
  for (const auto& [major, minor, text] :
       std::vector<std::tuple<char, char, std::string>>{{4, 0, "4.0"}, {1, 1, "1.1"}, {0, 0, "0.0"}}) {
    std::string bytes = npy_file(dict_for("<f4", "()"), raw_bytes<float>({1}));
    bytes[6] = major;
    bytes[7] = minor;
    EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(bytes)); }),
                             {"a.npy", "unsupported .npy format version " + text, "expected 1.0, 2.0 or 3.0"}));
  }
}

TEST_F(NpyTest, TruncatedHeader) {
  std::string bytes = npy_file(dict_for("<f4", "()"), "");
  bytes[8] = static_cast<char>(0xe8);  // header length 1000
  bytes[9] = 0x03;
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(bytes)); }),
                           {"a.npy", "truncated header", "expected 1000 bytes"}));
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(std::string("\x93NUMPY\x02\x00\x10", 9))); }),
                           {"truncated preamble", "header length"}));
}

TEST_F(NpyTest, MalformedHeader) {
  struct Case {
    std::string header;
    std::string key_words;
  };
  const std::vector<Case> cases = {
      {"", "expected the start of the header dict"},
      {"['descr', '<f4']", "expected the start of the header dict"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'descr': '<f4', 'shape': (1,)}", "missing key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (1,)}", "missing key 'descr'"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,", "expected an integer dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "expected a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 1)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (a,)}", "expected an integer dimension"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}", "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "duplicate key 'descr'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "unexpected text after the header dict"},
      {"{descr: '<f4'}", "expected a quoted key"},
      {"{'descr': 5, 'fortran_order': False, 'shape': (1,)}", "expected a quoted dtype string"},
      {"{'descr: '<f4'}", "expected ':' after key"},
      {"{'descr", "unterminated string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string message = io_error_message([&] { read(file_with(npy_file(c.header, raw_bytes<float>({1})))); });
    EXPECT_TRUE(contains_all(message, {"a.npy", "malformed header", c.key_words}));
  }
}

TEST_F(NpyTest, UnsupportedDtype) {
  const fs::path path = file_with(npy_file(dict_for("<c8", "(1,)"), std::string(8, '\0')), "Q.npy");
  EXPECT_EQ(io_error_message([&] { read(path); }),
            path.string() +
                ": unsupported dtype '<c8': expected float16 ('<f2'), float32 ('<f4'), float64 ('<f8'), "
                "int32 ('<i4') or int64 ('<i8')");
  for (const std::string descr : {"<u4", "|b1", "<f16", "f4", "<f4 ", "float32", "<M8[ns]", "<i2", "|u1"}) {
    SCOPED_TRACE(descr);
    EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(npy_file(dict_for(descr, "(1,)"), "xxxx"))); }),
                             {"a.npy", "unsupported dtype '" + descr + "'", "float16 ('<f2')", "int64 ('<i8')"}));
  }
  const std::string structured = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }";
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(npy_file(structured, "xxxx"))); }),
                           {"a.npy", "unsupported dtype", "structured", "float32 ('<f4')"}));
}

TEST_F(NpyTest, FortranOrderIsRejected) {
  const fs::path path = file_with(npy_file(dict_for("<f4", "(2, 2)", "True"), raw_bytes<float>({1, 2, 3, 4})));
  EXPECT_EQ(io_error_message([&] { read(path); }),
            path.string() + ": Fortran order is not supported: expected C order; use numpy.ascontiguousarray");
}

TEST_F(NpyTest, NegativeDimension) {
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(npy_file(dict_for("<f4", "(2, -3)"), ""))); }),
                           {"a.npy", "negative dimension -3", "(2, -3)", ">= 0"}));
}

TEST_F(NpyTest, AbsurdShapesAreErrorsNotAllocations) {
  // Element count overflows int64.
  EXPECT_TRUE(contains_all(
      io_error_message([&] { read(file_with(npy_file(dict_for("<f4", "(4294967296, 4294967296)"), ""))); }),
      {"a.npy", "(4294967296, 4294967296)", "too large"}));
  // Byte count overflows int64 though the element count does not.
  EXPECT_TRUE(
      contains_all(io_error_message([&] { read(file_with(npy_file(dict_for("<f8", "(2305843009213693952,)"), ""))); }),
                   {"a.npy", "too large"}));
  // A dimension that does not fit int64 at all.
  EXPECT_TRUE(
      contains_all(io_error_message([&] { read(file_with(npy_file(dict_for("<f4", "(99999999999999999999,)"), ""))); }),
                   {"a.npy", "dimension 99999999999999999999", "too large"}));
  // Representable but far more than the file holds: a truncation error.
  EXPECT_TRUE(
      contains_all(io_error_message([&] { read(file_with(npy_file(dict_for("<f4", "(1099511627776,)"), "abcd"))); }),
                   {"a.npy", "truncated data", "expected 4398046511104 bytes", "found 4"}));
}

TEST_F(NpyTest, TruncatedData) {
  const std::string message = io_error_message([&] {
    read(file_with(npy_file(dict_for("<f4", "(2, 3)"), raw_bytes<float>({1, 2, 3}))));
  });
  EXPECT_TRUE(contains_all(message, {"a.npy", "truncated data", "expected 24 bytes", "(2, 3) float32", "found 12"}));
  EXPECT_TRUE(contains_all(io_error_message([&] { read(file_with(npy_file(dict_for("<i8", "()"), ""))); }),
                           {"truncated data", "expected 8 bytes", "found 0"}));
}

TEST_F(NpyTest, BytesAfterTheData) {
  const std::string message = io_error_message([&] {
    read(file_with(npy_file(dict_for("<f4", "(2,)"), raw_bytes<float>({1, 2}) + "junk!")));
  });
  EXPECT_TRUE(contains_all(message, {"a.npy", "file has 5 bytes after the data", "8 bytes"}));
}

// ---- interoperability with real NumPy ----

class NpyNumpyTest : public NpyTest {
 protected:
  void SetUp() override {
    if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
    NpyTest::SetUp();
  }

  // Runs a Python script (numpy imported as np, `d` the test directory).
  int run_python(const std::string& body) {
    const fs::path script = dir_ / "script.py";
    std::ofstream(script) << "import sys\nimport numpy as np\nd = sys.argv[1]\n" << body << "\n";
    return std::system(("/usr/bin/python3 '" + script.string() + "' '" + dir_.string() + "'").c_str());
  }
};

TEST_F(NpyNumpyTest, ReadsFilesWrittenByNumpy) {
  ASSERT_EQ(run_python(R"(
np.save(f'{d}/f32.npy', (np.arange(24, dtype=np.float32) / np.float32(7)).reshape(2, 3, 4))
halves = np.arange(65536, dtype=np.uint16).view(np.float16)
np.save(f'{d}/f16.npy', halves)
np.save(f'{d}/f16_as_f32.npy', halves.astype(np.float32))
np.save(f'{d}/i32.npy', np.array([[-2147483648, 0], [5, 2147483647]], dtype=np.int32))
np.save(f'{d}/i64.npy', np.array([-(2**31), 2**31 - 1, 12], dtype=np.int64))
np.save(f'{d}/f64_be.npy', np.array([0.25, -1.5], dtype='>f8'))
np.save(f'{d}/scalar.npy', np.float32(3.5))
np.save(f'{d}/empty.npy', np.zeros((0, 3), dtype=np.float32))
np.save(f'{d}/fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
for v in [(2, 0), (3, 0)]:
    with open(f'{d}/v{v[0]}.npy', 'wb') as f:
        np.lib.format.write_array(f, np.arange(5, dtype=np.int32), version=v)
)"),
            0);

  {
    const Array array = read(dir_ / "f32.npy");
    EXPECT_EQ(array.type, ElementType::kFloat32);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3, 4}));
    const std::vector<float> values = array.to_float32();
    ASSERT_EQ(values.size(), 24u);
    for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(values[i], static_cast<float>(i) / 7.0f) << i;
  }
  {
    // Every float16 bit pattern against NumPy's own conversion.
    const Array halves = read(dir_ / "f16.npy");
    EXPECT_EQ(halves.type, ElementType::kFloat16);
    EXPECT_EQ(halves.shape, std::vector<int64_t>{65536});
    const std::vector<float> mine = halves.to_float32();
    const std::vector<float> numpy = read(dir_ / "f16_as_f32.npy").to_float32();
    ASSERT_EQ(mine.size(), numpy.size());
    int mismatches = 0;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const bool same = std::isnan(numpy[i]) ? std::isnan(mine[i]) : float_bits(mine[i]) == float_bits(numpy[i]);
      if (!same && ++mismatches <= 5)
        ADD_FAILURE() << "half 0x" << std::hex << i << ": " << mine[i] << " vs " << numpy[i];
    }
    EXPECT_EQ(mismatches, 0);
  }
  {
    const Array array = read(dir_ / "i32.npy");
    EXPECT_EQ(array.type, ElementType::kInt32);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(array.to_int32("i32"),
              (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 0, 5, std::numeric_limits<int32_t>::max()}));
  }
  {
    const Array array = read(dir_ / "i64.npy");
    EXPECT_EQ(array.type, ElementType::kInt64);
    EXPECT_EQ(array.to_int32("i64"),
              (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), 12}));
  }
  EXPECT_EQ(read(dir_ / "f64_be.npy").to_float32(), (std::vector<float>{0.25f, -1.5f}));
  {
    const Array array = read(dir_ / "scalar.npy");
    EXPECT_TRUE(array.shape.empty());
    EXPECT_EQ(array.to_float32(), std::vector<float>{3.5f});
  }
  EXPECT_EQ(read(dir_ / "empty.npy").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(contains_all(io_error_message([&] { read(dir_ / "fortran.npy"); }),
                           {"fortran.npy", "Fortran order is not supported", "numpy.ascontiguousarray"}));
  for (const char* name : {"v2.npy", "v3.npy"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(read(dir_ / name).to_int32(name), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  }
}

TEST_F(NpyNumpyTest, NumpyReadsOurFiles) {
  std::vector<float> f(24);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) / 7.0f;
  write(dir_ / "f32.npy", std::vector<int64_t>{2, 3, 4}, f);
  write(dir_ / "i32.npy", std::vector<int64_t>{5}, std::vector<int32_t>{-2147483647 - 1, -1, 0, 1, 2147483647});
  const float scalar = -0.75f;
  write(dir_ / "scalar.npy", std::vector<int64_t>{}, std::span<const float>(&scalar, 1));
  write(dir_ / "empty.npy", std::vector<int64_t>{3, 0}, std::vector<int32_t>{});
  EXPECT_EQ(run_python(R"(
def check(name, expected):
    a = np.load(f'{d}/{name}')
    assert a.dtype == expected.dtype, (name, a.dtype)
    assert a.shape == expected.shape, (name, a.shape)
    assert a.flags.c_contiguous
    assert np.array_equal(a, expected), (name, a)
check('f32.npy', (np.arange(24, dtype=np.float32) / np.float32(7)).reshape(2, 3, 4))
check('i32.npy', np.array([-2**31, -1, 0, 1, 2**31 - 1], dtype=np.int32))
check('scalar.npy', np.array(-0.75, dtype=np.float32))
check('empty.npy', np.zeros((3, 0), dtype=np.int32))
)"),
            0);
}

}  // namespace
}  // namespace attune::npy
