// Whole-file sha256 checks of payload files whose digest a manifest records (the ExpertPack).
// The file is read in chunks through pread (never mapped whole), and a successful check is
// cached next to it in "FILE.sha256-verified" (size, mtime in ns, digest) so that the next load
// of the unchanged file skips it; an unwritable folder just means no cache.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"

namespace k3 {

struct FileDigest {
  std::string path;    // the payload file
  std::string sha256;  // expected, 64 lower-case hex digits
  Where where;         // where the manifest records it (for plan-time errors)
};

// True when `hex` is 64 lower-case hex digits and not all zero (a placeholder, not a digest).
bool valid_sha256_hex(const std::string& hex);

// Checks the file against d.sha256 (using and refreshing the cache). Throws k3::Error
// "FILE: sha256 mismatch: manifest says X, payload is Y" on a mismatch. Shows a progress line
// on stderr for files of 256 MiB or more when stderr is a terminal.
void verify_file_digest(const FileDigest& d);

// The cache file of `path`.
std::string digest_cache_path(const std::string& path);

}  // namespace k3
