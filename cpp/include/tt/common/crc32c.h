// CRC-32C (Castagnoli): a checksum fast enough to check every byte a streamed load reads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt {

// The CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start). Uses the
// SSE4.2 instruction where the CPU has it (about 25 GB/s a core from cache, 14 from RAM on
// an AMD EPYC), a table otherwise.
// Detects accidental corruption; the artifact's SHA-256 digests guard against the rest.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);

// True when crc32c() uses the CPU's instruction.
bool crc32c_uses_cpu_instruction();

}  // namespace tt
