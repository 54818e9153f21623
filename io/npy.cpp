#include "io/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace attune::npy {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr std::size_t kVersionSize = 2;
// The data of a written file starts at a multiple of this, as NumPy does, so
// that it can be memory-mapped with aligned loads.
constexpr std::size_t kAlignment = 64;
constexpr std::size_t kMaxV1HeaderLength = std::numeric_limits<uint16_t>::max();
// Data is read in chunks so that memory grows with what the file really holds,
// not with what its header claims.
constexpr std::size_t kReadChunk = std::size_t{64} << 20;
// One write()/read() call moves at most this much (Linux caps it near 2 GiB).
constexpr std::size_t kMaxIoCall = std::size_t{1} << 30;
// How much of a bad header is quoted in an error message.
constexpr std::size_t kMaxQuotedHeader = 160;
constexpr std::string_view kSupportedDtypes =
    "float16 ('<f2'), float32 ('<f4'), float64 ('<f8'), int32 ('<i4') or int64 ('<i8')";

[[noreturn]] void fail(const fs::path& path, const std::string& message) {
  throw IoError(path.string() + ": " + message);
}

using io::errno_text;

// Makes arbitrary bytes printable on one line: \n, \xNN for the rest.
std::string quote_bytes(std::string_view bytes, std::size_t max_length) {
  std::string out;
  const std::size_t n = std::min(bytes.size(), max_length);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      constexpr std::string_view kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (bytes.size() > max_length) out += "...";
  return out;
}

std::string format_shape(std::span<const int64_t> shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";  // Python's 1-tuple
  out += ")";
  return out;
}

// Element count of a shape with non-negative dimensions, or -1 if the count
// times `element_bytes` would overflow int64. Any zero dimension
// makes the array empty regardless of the others (as in NumPy).
int64_t checked_element_count(std::span<const int64_t> shape, std::size_t element_bytes) {
  if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
  const auto max_bytes = std::numeric_limits<int64_t>::max();
  int64_t count = 1;
  for (const int64_t dim : shape) {
    if (count > max_bytes / dim) return -1;
    count *= dim;
  }
  if (count > max_bytes / static_cast<int64_t>(element_bytes)) return -1;
  return count;
}

// Owns a POSIX file descriptor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now so that the caller sees the error (close can report a failed
  // delayed write on some file systems).
  int close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

// Appends up to `count` bytes from `fd` to `out`, stopping early at end of
// file; returns how many were read.
std::size_t read_up_to(int fd, const fs::path& path, std::size_t count, std::vector<std::byte>& out) {
  std::size_t total = 0;
  while (total < count) {
    const std::size_t chunk = std::min(count - total, kReadChunk);
    const std::size_t old_size = out.size();
    out.resize(old_size + chunk);
    std::size_t got = 0;
    while (got < chunk) {
      const ssize_t n = ::read(fd, out.data() + old_size + got, std::min(chunk - got, kMaxIoCall));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(path, "cannot read: " + errno_text(errno));
      }
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    out.resize(old_size + got);
    total += got;
    if (got < chunk) break;  // end of file
  }
  return total;
}

// Counts the bytes left before end of file (without keeping them).
int64_t count_remaining(int fd, const fs::path& path) {
  std::array<char, 4096> buffer{};
  int64_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot read: " + errno_text(errno));
    }
    if (n == 0) return total;
    total += n;
  }
}

uint32_t load_le(std::span<const std::byte> bytes) {
  uint32_t value = 0;
  for (std::size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Parses the Python dict literal of a .npy header, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// A hand-written parser (not a general Python evaluator) that accepts exactly
// the literal forms NumPy writes plus harmless variations (spacing, quotes,
// key order, trailing commas).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const fs::path& path) : text_(text), path_(path) {}

  Header parse() {
    Header header;
    bool have_descr = false;
    bool have_fortran_order = false;
    bool have_shape = false;
    skip_space();
    expect('{', "the start of the header dict");
    while (true) {
      skip_space();
      if (consume('}')) break;
      if (!at_quote()) malformed("expected a quoted key or '}'");
      const std::string key = parse_string();
      skip_space();
      expect(':', "':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        mark_seen(have_descr, key);
        if (peek() == '[') {
          fail(path_, "unsupported dtype: structured arrays (a list of fields) are not supported: expected " +
                          std::string(kSupportedDtypes));
        }
        if (!at_quote()) malformed("expected a quoted dtype string for 'descr'");
        header.descr = parse_string();
      } else if (key == "fortran_order") {
        mark_seen(have_fortran_order, key);
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark_seen(have_shape, key);
        header.shape = parse_shape();
      } else {
        malformed("unexpected key '" + key + "': expected 'descr', 'fortran_order' or 'shape'");
      }
      skip_space();
      if (!consume(',') && peek() != '}') malformed("expected ',' or '}'");
    }
    skip_space();
    if (pos_ != text_.size()) malformed("unexpected text after the header dict");
    if (!have_descr) malformed("missing key 'descr'");
    if (!have_fortran_order) malformed("missing key 'fortran_order'");
    if (!have_shape) malformed("missing key 'shape'");
    return header;
  }

 private:
  [[noreturn]] void malformed(const std::string& what) const {
    const std::string got =
        pos_ < text_.size() ? "\"" + quote_bytes(text_.substr(pos_, 1), 1) + "\"" : std::string("end of header");
    fail(path_, "malformed header: " + what + ", got " + got + " at offset " + std::to_string(pos_) + " in header \"" +
                    quote_bytes(text_, kMaxQuotedHeader) + "\"");
  }

  void mark_seen(bool& seen, const std::string& key) const {
    if (seen) malformed("duplicate key '" + key + "'");
    seen = true;
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool at_quote() const { return peek() == '\'' || peek() == '"'; }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c, const std::string& what) {
    if (!consume(c)) malformed("expected " + what);
  }

  // A quoted string without escapes (NumPy never writes any in a header).
  std::string parse_string() {
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) malformed("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    if (value.find('\\') != std::string::npos) malformed("unsupported escape in string");
    pos_ = end + 1;
    return value;
  }

  bool parse_bool() {
    if (text_.substr(pos_).starts_with("True")) {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_).starts_with("False")) {
      pos_ += 5;
      return false;
    }
    malformed("expected True or False for 'fortran_order'");
  }

  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(', "a tuple such as (2, 3), (5,) or () for 'shape'");
    while (true) {
      skip_space();
      if (consume(')')) break;
      shape.push_back(parse_int());
      skip_space();
      if (!consume(',') && peek() != ')') malformed("expected ',' or ')' in 'shape'");
    }
    return shape;
  }

  int64_t parse_int() {
    const std::size_t start = pos_;
    const bool negative = consume('-');
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      malformed("expected an integer dimension in 'shape'");
    }
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t value = 0;
    bool overflow = false;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int64_t digit = text_[pos_++] - '0';
      if (value > (kMax - digit) / 10) overflow = true;
      if (!overflow) value = value * 10 + digit;
    }
    if (overflow) {
      fail(path_, "dimension " + std::string(text_.substr(start, pos_ - start)) +
                      " in 'shape' is too large: expected at most " + std::to_string(kMax));
    }
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;  // Python 2 long
    return negative ? -value : value;
  }

  std::string_view text_;
  const fs::path& path_;
  std::size_t pos_ = 0;
};

struct Dtype {
  ElementType type;
  bool swap;  // stored in the opposite byte order to the host's
};

Dtype parse_dtype(const std::string& descr, const fs::path& path) {
  auto unsupported = [&]() -> Dtype {
    fail(path,
         "unsupported dtype '" + quote_bytes(descr, kMaxQuotedHeader) + "': expected " + std::string(kSupportedDtypes));
  };
  if (descr.size() != 3) return unsupported();
  bool big_endian = false;
  switch (descr[0]) {
    case '<':
      big_endian = false;
      break;
    case '>':
      big_endian = true;
      break;
    case '|':  // "not applicable": NumPy uses it for 1-byte types; read as native
    case '=':
      big_endian = std::endian::native == std::endian::big;
      break;
    default:
      return unsupported();
  }
  const std::string_view code = std::string_view(descr).substr(1);
  ElementType type;
  if (code == "f2") {
    type = ElementType::kFloat16;
  } else if (code == "f4") {
    type = ElementType::kFloat32;
  } else if (code == "f8") {
    type = ElementType::kFloat64;
  } else if (code == "i4") {
    type = ElementType::kInt32;
  } else if (code == "i8") {
    type = ElementType::kInt64;
  } else {
    return unsupported();
  }
  return {type, big_endian != (std::endian::native == std::endian::big)};
}

void swap_elements(std::vector<std::byte>& bytes, std::size_t element_bytes) {
  for (std::size_t i = 0; i + element_bytes <= bytes.size(); i += element_bytes) {
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i + element_bytes));
  }
}

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Element count of `array`, checking that its bytes match its shape (an Array
// built by hand could disagree).
std::size_t consistent_count(const Array& array) {
  const std::size_t element_bytes = element_size(array.type);
  const int64_t count = checked_element_count(array.shape, element_bytes);
  if (count < 0 || static_cast<std::size_t>(count) * element_bytes != array.bytes.size()) {
    throw InvalidArgument("npy::Array has " + std::to_string(array.bytes.size()) + " bytes: expected " +
                          (count < 0 ? std::string("a representable shape") : std::to_string(count * element_bytes)) +
                          " for shape " + format_shape(array.shape) + " " + std::string(to_string(array.type)));
  }
  return static_cast<std::size_t>(count);
}

// ---- writing ----

template <typename T>
constexpr std::string_view descr_for();
template <>
constexpr std::string_view descr_for<float>() {
  return "<f4";
}
template <>
constexpr std::string_view descr_for<int32_t>() {
  return "<i4";
}

// Magic, version, header length and the padded header dict.
std::string build_preamble_and_header(std::string_view descr, std::span<const int64_t> shape) {
  const std::string dict =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + format_shape(shape) + ", }";
  for (const int version : {1, 2}) {
    const std::size_t length_field = version == 1 ? 2 : 4;
    const std::size_t prefix = kMagic.size() + kVersionSize + length_field;
    const std::size_t unpadded = prefix + dict.size() + 1;  // + '\n'
    const std::size_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
    const std::size_t header_length = dict.size() + padding + 1;
    if (version == 1 && header_length > kMaxV1HeaderLength) continue;
    std::string out(kMagic);
    out += static_cast<char>(version);
    out += '\0';
    for (std::size_t i = 0; i < length_field; ++i) out += static_cast<char>((header_length >> (8 * i)) & 0xffu);
    out += dict;
    out.append(padding, ' ');
    out += '\n';
    return out;
  }
  // A 4 GiB header needs ~400 million dimensions; shape validation rules that out.
  throw InvalidArgument("npy header for shape with " + std::to_string(shape.size()) + " dimensions is too long");
}

template <typename T>
void write_array(const fs::path& path, std::span<const int64_t> shape, std::span<const T> data) {
  for (const int64_t dim : shape) {
    if (dim < 0) {
      throw InvalidArgument(path.string() + ": negative dimension " + std::to_string(dim) + " in shape " +
                            format_shape(shape) + ": expected dimensions >= 0");
    }
  }
  const int64_t count = checked_element_count(shape, sizeof(T));
  if (count < 0 || static_cast<uint64_t>(count) != data.size()) {
    throw InvalidArgument(path.string() + ": shape " + format_shape(shape) + " has " +
                          (count < 0 ? std::string("too many") : std::to_string(count)) + " elements but data has " +
                          std::to_string(data.size()) + ": expected them to be equal");
  }
  const std::string header = build_preamble_and_header(descr_for<T>(), shape);
  std::vector<T> swapped;  // only used on big-endian hosts
  std::span<const std::byte> payload = std::as_bytes(data);
  if constexpr (std::endian::native == std::endian::big) {
    swapped.resize(data.size());
    for (std::size_t i = 0; i < data.size(); ++i) {
      auto bytes = std::bit_cast<std::array<std::byte, sizeof(T)>>(data[i]);
      std::reverse(bytes.begin(), bytes.end());
      swapped[i] = std::bit_cast<T>(bytes);
    }
    payload = std::as_bytes(std::span<const T>(swapped));
  }
  const std::array<std::span<const std::byte>, 2> pieces = {
      std::as_bytes(std::span<const char>(header.data(), header.size())), payload};
  io::write_file_atomically(path, pieces);
}

}  // namespace

constexpr NamedValue<ElementType> kElementTypeNames[] = {{ElementType::kFloat16, "float16"},
                                                         {ElementType::kFloat32, "float32"},
                                                         {ElementType::kFloat64, "float64"},
                                                         {ElementType::kInt32, "int32"},
                                                         {ElementType::kInt64, "int64"}};

std::string_view to_string(ElementType type) { return name_of(kElementTypeNames, type, "unknown"); }

std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::kFloat16:
      return 2;
    case ElementType::kFloat32:
    case ElementType::kInt32:
      return 4;
    case ElementType::kFloat64:
    case ElementType::kInt64:
      return 8;
  }
  return 0;
}

int64_t Array::size() const {
  if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
  int64_t count = 1;
  for (const int64_t dim : shape) count *= dim;
  return count;
}

std::vector<float> Array::to_float32() const {
  const std::size_t count = consistent_count(*this);
  std::vector<float> out(count);
  const std::byte* p = bytes.data();
  for (std::size_t i = 0; i < count; ++i) {
    switch (type) {
      case ElementType::kFloat16:
        out[i] = half_bits_to_float(load<uint16_t>(p + 2 * i));
        break;
      case ElementType::kFloat32:
        out[i] = load<float>(p + 4 * i);
        break;
      case ElementType::kFloat64:
        out[i] = static_cast<float>(load<double>(p + 8 * i));
        break;
      case ElementType::kInt32:
        out[i] = static_cast<float>(load<int32_t>(p + 4 * i));
        break;
      case ElementType::kInt64:
        out[i] = static_cast<float>(load<int64_t>(p + 8 * i));
        break;
    }
  }
  return out;
}

std::vector<int32_t> Array::to_int32(std::string_view what) const {
  if (type != ElementType::kInt32 && type != ElementType::kInt64) {
    throw IoError(std::string(what) + ": expected an integer array (int32 or int64), got " +
                  std::string(to_string(type)));
  }
  const std::size_t count = consistent_count(*this);
  std::vector<int32_t> out(count);
  if (type == ElementType::kInt32) {
    if (count > 0) std::memcpy(out.data(), bytes.data(), count * sizeof(int32_t));
    return out;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const auto value = load<int64_t>(bytes.data() + 8 * i);
    if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
      throw IoError(std::string(what) + ": value " + std::to_string(value) + " at index " + std::to_string(i) +
                    " is out of int32 range: expected " + std::to_string(std::numeric_limits<int32_t>::min()) + " to " +
                    std::to_string(std::numeric_limits<int32_t>::max()));
    }
    out[i] = static_cast<int32_t>(value);
  }
  return out;
}

Array read(const fs::path& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) fail(path, "cannot open for reading: " + errno_text(errno));
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) fail(path, "cannot stat: " + errno_text(errno));
  if (S_ISDIR(info.st_mode)) fail(path, "cannot read: " + errno_text(EISDIR) + ": expected a .npy file");
  const bool regular = S_ISREG(info.st_mode);

  // Magic and version.
  std::vector<std::byte> preamble;
  read_up_to(file.get(), path, kMagic.size() + kVersionSize, preamble);
  const std::string_view start(reinterpret_cast<const char*>(preamble.data()), preamble.size());
  if (start.size() < kMagic.size() || start.substr(0, kMagic.size()) != kMagic) {
    fail(path, "not a .npy file: expected magic \"\\x93NUMPY\", got " +
                   (start.empty() ? std::string("an empty file") : "\"" + quote_bytes(start, kMagic.size()) + "\""));
  }
  if (start.size() < kMagic.size() + kVersionSize) {
    fail(path, "truncated preamble: expected " + std::to_string(kMagic.size() + kVersionSize) +
                   " bytes (magic and version), found " + std::to_string(start.size()));
  }
  const auto major = static_cast<uint8_t>(start[6]);
  const auto minor = static_cast<uint8_t>(start[7]);
  if (major < 1 || major > 3 || minor != 0) {
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   ": expected 1.0, 2.0 or 3.0");
  }

  // Header length (little-endian u16 for 1.0, u32 after) and the header.
  const std::size_t length_field = major == 1 ? 2 : 4;
  std::vector<std::byte> length_bytes;
  if (read_up_to(file.get(), path, length_field, length_bytes) < length_field) {
    fail(path, "truncated preamble: expected a " + std::to_string(length_field) + "-byte header length, found " +
                   std::to_string(length_bytes.size()) + " bytes");
  }
  const std::size_t header_length = load_le(length_bytes);
  std::vector<std::byte> header_bytes;
  if (read_up_to(file.get(), path, header_length, header_bytes) < header_length) {
    fail(path, "truncated header: expected " + std::to_string(header_length) + " bytes, found " +
                   std::to_string(header_bytes.size()));
  }
  const std::string_view header_text(reinterpret_cast<const char*>(header_bytes.data()), header_bytes.size());
  const Header header = HeaderParser(header_text, path).parse();

  const Dtype dtype = parse_dtype(header.descr, path);
  if (header.fortran_order) {
    fail(path, "Fortran order is not supported: expected C order; use numpy.ascontiguousarray");
  }
  for (const int64_t dim : header.shape) {
    if (dim < 0) {
      fail(path, "negative dimension " + std::to_string(dim) + " in shape " + format_shape(header.shape) +
                     ": expected dimensions >= 0");
    }
  }
  const std::size_t element_bytes = element_size(dtype.type);
  const int64_t count = checked_element_count(header.shape, element_bytes);
  if (count < 0) {
    fail(path, "shape " + format_shape(header.shape) + " of " + std::string(to_string(dtype.type)) +
                   " is too large: its byte size overflows int64");
  }
  const auto data_bytes = static_cast<uint64_t>(count) * element_bytes;
  const std::string data_description = std::to_string(data_bytes) + " bytes for shape " + format_shape(header.shape) +
                                       " " + std::string(to_string(dtype.type));
  auto truncated = [&](uint64_t found) {
    fail(path, "truncated data: expected " + data_description + ", found " + std::to_string(found));
  };
  auto trailing = [&](uint64_t extra) {
    fail(path, "file has " + std::to_string(extra) + " bytes after the data: expected exactly " + data_description);
  };

  // For a regular file, check the size before allocating anything.
  const auto data_offset = static_cast<uint64_t>(kMagic.size() + kVersionSize + length_field + header_length);
  if (regular) {
    const auto file_size = static_cast<uint64_t>(info.st_size);
    const uint64_t available = file_size > data_offset ? file_size - data_offset : 0;
    if (available < data_bytes) truncated(available);
    if (available > data_bytes) trailing(available - data_bytes);
  }

  Array array;
  array.type = dtype.type;
  array.shape = header.shape;
  array.bytes.reserve(regular ? static_cast<std::size_t>(data_bytes) : 0);
  const std::size_t got = read_up_to(file.get(), path, static_cast<std::size_t>(data_bytes), array.bytes);
  if (got < data_bytes) truncated(got);
  if (const int64_t extra = count_remaining(file.get(), path); extra > 0) trailing(static_cast<uint64_t>(extra));
  if (dtype.swap) swap_elements(array.bytes, element_bytes);
  return array;
}

void write(const fs::path& path, std::span<const int64_t> shape, std::span<const float> data) {
  write_array(path, shape, data);
}

void write(const fs::path& path, std::span<const int64_t> shape, std::span<const int32_t> data) {
  write_array(path, shape, data);
}

}  // namespace attune::npy
