// SHA-256 (FIPS 180-4) for the artifact's integrity digests, without an OpenSSL dependency.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tt {

// A SHA-256 digest: 32 bytes, most significant byte first (the order hex digests are printed in).
using Sha256Digest = std::array<std::uint8_t, 32>;

// Which compression code a hasher runs. Both give the same digests; Portable exists so that the
// tests can compare the two on a machine that has the extensions.
enum class Sha256Impl {
  Fastest,   // the x86 SHA extensions where the CPU has them (checked once per process), else Portable
  Portable,  // plain C++
};

// Incremental SHA-256. Not thread-safe: one hasher per thread; cheap to construct (no allocation).
class Sha256 {
 public:
  explicit Sha256(Sha256Impl impl = Sha256Impl::Fastest);

  // Appends `size` bytes at `data` (may be null when size is 0) to the message.
  void update(const void* data, std::size_t size);

  // Pads the message, returns its digest and resets the hasher for a new message.
  Sha256Digest finish();

  // Starts a new, empty message.
  void reset();

 private:
  using Compress = void (*)(std::uint32_t* state, const std::uint8_t* blocks, std::size_t count);

  Compress compress_;
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> block_;  // the message's incomplete trailing block
  std::size_t block_bytes_;             // bytes used in block_, < 64
  std::uint64_t total_bytes_;           // message length so far
};

// Digest of one whole message.
Sha256Digest sha256(const void* data, std::size_t size);

// Lower-case hex of a digest: 64 characters, as hashlib's hexdigest() prints it.
std::string digest_to_hex(const Sha256Digest& digest);

// Parses 64 hex digits (either case). Throws Error(InvalidArgument) quoting the text otherwise.
Sha256Digest hex_to_digest(std::string_view hex);

// True when Sha256Impl::Fastest runs the CPU's SHA extensions (for benchmarks to report which code ran).
bool sha256_uses_cpu_extensions();

}  // namespace tt
