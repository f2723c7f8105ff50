#include "core/sha256.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <cerrno>
#include <vector>

#include "core/error.h"

namespace k3 {
namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::array<uint32_t, 8> kInitial = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Sha256::Sha256() : state_(kInitial) {}

void Sha256::compress(const uint8_t* block) {
  std::array<uint32_t, 64> w;
  for (int i = 0; i < 16; ++i) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t sum1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + sum1 + choose + kRound[i] + w[i];
    const uint32_t sum0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(std::span<const uint8_t> bytes) {
  total_bytes_ += bytes.size();
  size_t pos = 0;
  if (buffered_ > 0) {
    const size_t take = std::min<size_t>(64 - buffered_, bytes.size());
    std::memcpy(buffer_.data() + buffered_, bytes.data(), take);
    buffered_ += take;
    pos = take;
    if (buffered_ < 64) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; pos + 64 <= bytes.size(); pos += 64) compress(bytes.data() + pos);
  std::memcpy(buffer_.data(), bytes.data() + pos, bytes.size() - pos);
  buffered_ = bytes.size() - pos;
}

void Sha256::update(std::string_view text) {
  update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Sha256::Digest Sha256::finish() {
  const uint64_t bit_length = total_bytes_ * 8;
  // 0x80, zeros up to 56 mod 64, then the 64-bit big-endian bit length.
  std::array<uint8_t, 72> tail{};
  tail[0] = 0x80;
  const size_t pad = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i) tail[pad + i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
  update(std::span<const uint8_t>(tail.data(), pad + 8));
  Digest out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
  }
  return out;
}

std::string to_hex(const Sha256::Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return to_hex(h.finish());
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return to_hex(h.finish());
}

std::string sha256_file_hex(const std::string& path) {
  // O_NONBLOCK + the regular-file check first: a FIFO must not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(Where{path, "", ""}, std::string("cannot read: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(Where{path, "", ""}, "not a regular file");
  }
  Sha256 h;
  std::vector<uint8_t> buf(1 << 16);
  for (;;) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(Where{path, "", ""}, std::string("read failed: ") + std::strerror(err));
    }
    if (got == 0) break;
    h.update(std::span<const uint8_t>(buf.data(), static_cast<size_t>(got)));
  }
  ::close(fd);
  return to_hex(h.finish());
}

}  // namespace k3
