#include "cache/digest.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace skippy::cache {

std::string digest256::hex(size_t n_bytes) const {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < n_bytes && i < bytes.size(); ++i) {
        out += digits[bytes[i] >> 4];
        out += digits[bytes[i] & 15];
    }
    return out;
}

// OpenSSL's SHA-256 only fails on allocation failure or a broken library; neither is
// something a caller could handle, so they abort like an out-of-memory would.
sha256_hasher::sha256_hasher() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX *>(ctx_), EVP_sha256(), nullptr) != 1) std::abort();
}

sha256_hasher::~sha256_hasher() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX *>(ctx_)); }

void sha256_hasher::update(std::span<const uint8_t> data) {
    if (data.empty()) return;
    if (EVP_DigestUpdate(static_cast<EVP_MD_CTX *>(ctx_), data.data(), data.size()) != 1) std::abort();
}

digest256 sha256_hasher::finish() {
    digest256 d;
    unsigned int n = 0;
    if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX *>(ctx_), d.bytes.data(), &n) != 1 || n != 32) std::abort();
    return d;
}

digest256 sha256(std::span<const uint8_t> data) {
    sha256_hasher h;
    h.update(data);
    return h.finish();
}

}  // namespace skippy::cache
