// Files a command writes. Every output goes to a temporary file in the destination's directory
// and is renamed into place, so a failed run leaves the old file intact; an output that is the
// same file (device and inode) as any file this process opened for reading (File::open notes
// each one) is refused, so a command can never overwrite its own input.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace k3 {

// Records a file opened for reading (its path and device, inode). Called by File::open. It stays an
// input while `path` still names that inode.
void note_input_file(const std::string& path, uint64_t device, uint64_t inode);

// Throws k3::Error (file `path`, field `flag` when given) when `path` resolves to a file that this
// process has read, or to a directory; otherwise returns. A path that does not exist yet passes.
void refuse_input_overwrite(const std::string& path, const std::string& flag = "");

// refuse_input_overwrite, then checks that `path`'s directory exists and is writable: a command
// calls it before its work so that a bad output path fails fast.
void check_output_path(const std::string& path, const std::string& flag = "");

// Writes `bytes` to `path` atomically (temporary file + rename in the same directory), after
// refuse_input_overwrite. An existing character device or FIFO (/dev/null, a pipe) is written in
// place. Throws k3::Error naming the path on any failure; the temporary file is removed.
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, const std::string& flag = "");

}  // namespace k3
