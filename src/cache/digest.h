// SHA-256 digests: the cache's hash wherever a collision must be infeasible (identities,
// prefix keys, content-addressed blocks). Page images checksum with CRC-32C instead
// (base/crc32c.h): that guards against corruption only, at fifteen times the speed.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace skippy::cache {

struct digest256 {
    std::array<uint8_t, 32> bytes{};

    auto operator<=>(const digest256 &) const = default;
    bool operator==(const digest256 &) const = default;

    // Lowercase hex of the first n_bytes bytes (all 32 by default).
    std::string hex(size_t n_bytes = 32) const;
};

// Incremental SHA-256 (OpenSSL EVP). One object hashes one message.
class sha256_hasher {
public:
    sha256_hasher();
    ~sha256_hasher();
    sha256_hasher(const sha256_hasher &) = delete;
    sha256_hasher & operator=(const sha256_hasher &) = delete;

    void update(std::span<const uint8_t> data);
    // REQUIRES: called once; no update afterwards.
    digest256 finish();

private:
    void * ctx_;  // EVP_MD_CTX, kept opaque so OpenSSL headers stay out of ours
};

digest256 sha256(std::span<const uint8_t> data);

// For unordered containers: the digest is already uniform, its first 8 bytes suffice.
struct digest256_hash {
    size_t operator()(const digest256 & d) const {
        size_t h = 0;
        for (int i = 0; i < 8; ++i) h = (h << 8) | d.bytes[static_cast<size_t>(i)];
        return h;
    }
};

}  // namespace skippy::cache
