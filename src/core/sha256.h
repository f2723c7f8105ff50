// SHA-256 (FIPS 180-4), incremental. Used for ExpertPack index and manifest digests.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace k3 {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  // Pads and returns the digest; the object must not be updated afterwards.
  Digest finish();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  uint64_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex of a digest (64 characters).
std::string to_hex(const Sha256::Digest& digest);
std::string sha256_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view text);
// Digest of a whole file, read in chunks. Throws k3::Error naming the path when unreadable.
std::string sha256_file_hex(const std::string& path);

}  // namespace k3
