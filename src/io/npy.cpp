#include "io/npy.h"

#include <bit>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "io/file.h"
#include "io/output_file.h"

namespace k3 {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;

struct DtypeInfo {
  std::string_view descr;
  size_t itemsize;
};
constexpr DtypeInfo kDtypes[] = {{"<f2", 2}, {"<f4", 4}, {"<f8", 8}, {"<i4", 4}, {"<i8", 8}, {"|u1", 1}};

const DtypeInfo* find_dtype(std::string_view descr) {
  for (const DtypeInfo& d : kDtypes)
    if (d.descr == descr) return &d;
  return nullptr;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// Element count and byte count of (shape, itemsize); false on uint64 overflow.
bool byte_count(const std::vector<uint64_t>& shape, size_t itemsize, uint64_t& nbytes) {
  uint64_t n = itemsize;
  for (uint64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return false;
  nbytes = n;
  return true;
}

[[noreturn]] void throw_at(const std::string& file, const char* field, const std::string& message) {
  throw Error(Where{file, "", field}, message);
}

uint64_t read_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The header is a Python dict literal with exactly the keys 'descr' (str), 'fortran_order'
// (True/False) and 'shape' (tuple of non-negative ints), optionally ending in a comma, followed
// only by whitespace (NumPy pads with spaces and ends with '\n').
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  void parse(NpyArray& out) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_ws();
    expect('{', "header");
    skip_ws();
    while (!consume('}')) {
      const std::string key = parse_string("header");
      skip_ws();
      expect(':', "header");
      skip_ws();
      if (key == "descr") {
        mark_seen(seen_descr, key);
        out.dtype = parse_string("descr");
        if (!find_dtype(out.dtype))
          fail("descr", "unsupported dtype '" + out.dtype + "' (supported: <f2 <f4 <f8 <i4 <i8 |u1)");
      } else if (key == "fortran_order") {
        mark_seen(seen_fortran, key);
        if (parse_bool()) fail("fortran_order", "Fortran-order arrays are not supported (C order only)");
      } else if (key == "shape") {
        mark_seen(seen_shape, key);
        out.shape = parse_shape();
      } else {
        fail("header", "unknown key '" + key + "'");
      }
      skip_ws();
      if (consume(',')) {
        skip_ws();
      } else if (peek() != '}') {
        fail("header", "expected ',' or '}' at offset " + std::to_string(pos_));
      }
    }
    skip_ws();
    if (pos_ != text_.size()) fail("header", "unexpected text after the dict at offset " + std::to_string(pos_));
    if (!seen_descr) fail("descr", "missing key");
    if (!seen_fortran) fail("fortran_order", "missing key");
    if (!seen_shape) fail("shape", "missing key");
  }

 private:
  [[noreturn]] void fail(const char* field, const std::string& message) const { throw_at(name_, field, message); }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool consume(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const char* field) {
    if (!consume(c)) fail(field, std::string("expected '") + c + "' at offset " + std::to_string(pos_));
  }
  void mark_seen(bool& seen, const std::string& key) const {
    if (seen) fail("header", "duplicate key '" + key + "'");
    seen = true;
  }

  // A quoted string without escapes ('...' or "...").
  std::string parse_string(const char* field) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(field, "expected a quoted string at offset " + std::to_string(pos_));
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail(field, "escape sequences are not supported at offset " + std::to_string(pos_));
      ++pos_;
    }
    if (pos_ >= text_.size()) fail(field, "unterminated string");
    return std::string(text_.substr(start, pos_++ - start));
  }

  bool parse_bool() {
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("fortran_order", "expected True or False at offset " + std::to_string(pos_));
  }

  uint64_t parse_uint() {
    if (peek() < '0' || peek() > '9') fail("shape", "expected a non-negative integer at offset " + std::to_string(pos_));
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<uint64_t>(peek() - '0'), &v))
        fail("shape", "dimension does not fit in 64 bits");
      ++pos_;
    }
    return v;
  }

  // "()", "(n,)", "(n, m)" or "(n, m,)"; a 1-tuple needs its comma, as in Python.
  std::vector<uint64_t> parse_shape() {
    std::vector<uint64_t> shape;
    expect('(', "shape");
    skip_ws();
    bool trailing_comma = false;
    while (!consume(')')) {
      shape.push_back(parse_uint());
      skip_ws();
      trailing_comma = consume(',');
      skip_ws();
      if (!trailing_comma && peek() != ')') fail("shape", "expected ',' or ')' at offset " + std::to_string(pos_));
    }
    if (shape.size() == 1 && !trailing_comma) fail("shape", "not a tuple: '(n)' needs a comma, '(n,)'");
    return shape;
  }

  std::string_view text_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace

uint64_t NpyArray::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

size_t npy_itemsize(const std::string& dtype) {
  const DtypeInfo* d = find_dtype(dtype);
  if (!d) throw Error(Where{"", "", "descr"}, "unsupported dtype '" + dtype + "' (supported: <f2 <f4 <f8 <i4 <i8 |u1)");
  return d->itemsize;
}

NpyArray parse_npy(const uint8_t* p, size_t n, const std::string& name) {
  auto fail = [&name](const char* field, const std::string& message) { throw_at(name, field, message); };
  if (n < kMagicLen || std::memcmp(p, kNpyMagic, kMagicLen) != 0) fail("magic", "not a .npy file (bad magic)");
  if (n < kMagicLen + 2) fail("version", "truncated: the file has " + std::to_string(n) + " bytes");
  const unsigned major = p[6], minor = p[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    fail("version", "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor));
  const size_t len_bytes = major == 1 ? 2 : 4;
  const uint64_t header_start = kMagicLen + 2 + len_bytes;
  if (n < header_start) fail("header_len", "truncated: the file has " + std::to_string(n) + " bytes");
  const uint64_t header_len = read_le(p + kMagicLen + 2, len_bytes);
  if (!range_fits(header_start, header_len, n))
    fail("header", "truncated: header of " + std::to_string(header_len) + " bytes at offset " +
                       std::to_string(header_start) + " but the file has " + std::to_string(n) + " bytes");

  NpyArray out;
  HeaderParser(std::string_view(reinterpret_cast<const char*>(p + header_start), header_len), name).parse(out);

  const uint64_t data_start = header_start + header_len;
  uint64_t nbytes = 0;
  if (!byte_count(out.shape, npy_itemsize(out.dtype), nbytes))
    fail("shape", "byte size of shape " + shape_text(out.shape) + " overflows 64 bits");
  if (n - data_start != nbytes)
    fail("data", "shape " + shape_text(out.shape) + " of '" + out.dtype + "' needs " + std::to_string(nbytes) +
                     " bytes but the file has " + std::to_string(n - data_start) + " bytes after the header");
  out.data.assign(p + data_start, p + n);
  return out;
}

NpyArray read_npy(const std::string& path) {
  auto file = File::open(path);
  const std::vector<uint8_t> bytes = file->read_range(0, file->size(), "");
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> serialize_npy(const std::string& dtype, const std::vector<uint64_t>& shape, const void* data,
                                   size_t nbytes) {
  uint64_t expected = 0;
  if (!byte_count(shape, npy_itemsize(dtype), expected))
    throw Error(Where{"", "", "shape"}, "byte size of shape " + shape_text(shape) + " overflows 64 bits");
  if (expected != nbytes)
    throw Error(Where{"", "", "data"}, "shape " + shape_text(shape) + " of '" + dtype + "' needs " +
                                           std::to_string(expected) + " bytes but " + std::to_string(nbytes) +
                                           " were given");

  std::string header = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Magic, version, header length (16 bits in version 1.0, 32 in 2.0), then the dict padded with
  // spaces and ended by '\n' so that the data starts at a multiple of 64.
  auto padded_end = [&header](size_t preamble) { return (preamble + header.size() + 1 + kAlign - 1) / kAlign * kAlign; };
  size_t preamble = kMagicLen + 2 + 2;
  if (padded_end(preamble) - preamble > 0xFFFF) preamble += 2;
  const size_t total = padded_end(preamble);
  header.append(total - preamble - header.size() - 1, ' ');
  header += '\n';

  std::vector<uint8_t> out(total + nbytes);
  std::memcpy(out.data(), kNpyMagic, kMagicLen);
  out[6] = preamble == 10 ? 1 : 2;
  out[7] = 0;
  for (size_t i = 0; i < preamble - 8; ++i) out[8 + i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::memcpy(out.data() + preamble, header.data(), header.size());
  if (nbytes) std::memcpy(out.data() + total, data, nbytes);
  return out;
}

void write_npy(const std::string& path, const std::string& dtype, const std::vector<uint64_t>& shape,
               const void* data, size_t nbytes) {
  std::vector<uint8_t> bytes;
  try {
    bytes = serialize_npy(dtype, shape, data, nbytes);
  } catch (const Error& e) {
    throw Error(Where{path, "", e.where().field}, e.detail());
  }
  write_file_atomic(path, bytes);
}

void write_npy_f32(const std::string& path, const std::vector<uint64_t>& shape, const float* data) {
  uint64_t nbytes = 0;
  if (!byte_count(shape, sizeof(float), nbytes))
    throw Error(Where{path, "", "shape"}, "byte size of shape " + shape_text(shape) + " overflows 64 bits");
  write_npy(path, "<f4", shape, data, nbytes);
}

}  // namespace k3
