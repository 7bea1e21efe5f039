// CRC-32C (Castagnoli): a checksum fast enough to check every byte a streamed load reads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// The CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start). Uses the CPU's
// crc32 instruction where it has one (x86's SSE4.2, ARMv8's CRC extension: about 25 GB/s a
// core from cache, 14 from RAM on an AMD EPYC), crc32c_portable() otherwise.
// Detects accidental corruption; the artifact's SHA-256 digests guard against the rest.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);

// The same checksum from tables (a few GB/s a core), on any CPU.
std::uint32_t crc32c_portable(const void* data, std::size_t size, std::uint32_t crc = 0);

}  // namespace tt
