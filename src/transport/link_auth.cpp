#include "transport/link_auth.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <arpa/inet.h>

#include <cassert>
#include <fstream>
#include <iterator>
#include <vector>

namespace skippy::transport {

namespace {

// Labels keep the four HMACs of a session apart: a dialer's proof is never a valid
// listener proof, and no proof is a frame key.
constexpr std::string_view dialer_proof_label = "skippy v6 dialer proof";
constexpr std::string_view listener_proof_label = "skippy v6 listener proof";
constexpr std::string_view dialer_frames_label = "skippy v6 frames dialer to listener";
constexpr std::string_view listener_frames_label = "skippy v6 frames listener to dialer";

protocol::auth_mac hmac_over(std::string_view key, std::string_view label, std::span<const uint8_t> hello_bytes,
                             const protocol::auth_nonce & listener_nonce) {
    assert(!key.empty());
    std::vector<uint8_t> msg(label.begin(), label.end());
    msg.insert(msg.end(), hello_bytes.begin(), hello_bytes.end());
    msg.insert(msg.end(), listener_nonce.begin(), listener_nonce.end());
    protocol::auth_mac out{};
    unsigned int n = 0;
    // A failure here (out of memory) leaves `out` zero: a proof nobody accepts.
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg.data(), msg.size(), out.data(), &n);
    return out;
}

EVP_MAC * hmac_algorithm() {
    static EVP_MAC * mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);  // never freed: one per process
    return mac;
}

EVP_MAC_CTX * as_ctx(void * p) { return static_cast<EVP_MAC_CTX *>(p); }

}  // namespace

result<std::string> load_stage_key(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(error_code::invalid_argument, "cannot read the stage key file " + path);
    std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return make_error(error_code::invalid_argument, "cannot read the stage key file " + path);
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    if (key.size() < min_stage_key_bytes) {
        return make_error(error_code::invalid_argument, "the stage key in " + path + " has " + std::to_string(key.size()) +
                                                            " bytes; at least " + std::to_string(min_stage_key_bytes) +
                                                            " are needed (e.g. openssl rand -hex 32 > " + path + ")");
    }
    return key;
}

result<protocol::auth_nonce> random_nonce() {
    protocol::auth_nonce n{};
    if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) return make_error(error_code::internal, "no random bytes for a nonce");
    return n;
}

bool macs_equal(const protocol::auth_mac & a, const protocol::auth_mac & b) {
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

protocol::auth_mac handshake_proof(std::string_view key, link_role who, std::span<const uint8_t> hello_bytes,
                                   const protocol::auth_nonce & listener_nonce) {
    return hmac_over(key, who == link_role::dialer ? dialer_proof_label : listener_proof_label, hello_bytes, listener_nonce);
}

link_macs derive_link_macs(std::string_view key, link_role me, std::span<const uint8_t> hello_bytes,
                           const protocol::auth_nonce & listener_nonce) {
    const protocol::auth_mac from_dialer = hmac_over(key, dialer_frames_label, hello_bytes, listener_nonce);
    const protocol::auth_mac from_listener = hmac_over(key, listener_frames_label, hello_bytes, listener_nonce);
    link_macs m;
    m.send = frame_mac(me == link_role::dialer ? from_dialer : from_listener);
    m.recv = frame_mac(me == link_role::dialer ? from_listener : from_dialer);
    return m;
}

frame_mac::frame_mac(const protocol::auth_mac & key) {
    EVP_MAC * alg = hmac_algorithm();
    EVP_MAC_CTX * ctx = alg ? EVP_MAC_CTX_new(alg) : nullptr;
    if (!ctx) return;  // off: seal() is never reached, and the handshake's caller checks on()
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    if (EVP_MAC_init(ctx, key.data(), key.size(), params) != 1) {
        EVP_MAC_CTX_free(ctx);
        return;
    }
    ctx_ = ctx;
}

frame_mac::~frame_mac() {
    if (ctx_) EVP_MAC_CTX_free(as_ctx(ctx_));
}

frame_mac::frame_mac(frame_mac && o) noexcept : ctx_(o.ctx_), seq_(o.seq_) { o.ctx_ = nullptr; }

frame_mac & frame_mac::operator=(frame_mac && o) noexcept {
    if (this != &o) {
        if (ctx_) EVP_MAC_CTX_free(as_ctx(ctx_));
        ctx_ = o.ctx_;
        seq_ = o.seq_;
        o.ctx_ = nullptr;
    }
    return *this;
}

result<protocol::auth_mac> frame_mac::seal(std::span<const uint8_t> frame) {
    assert(on());
    uint8_t seq[8];
    for (int i = 0; i < 8; ++i) seq[i] = static_cast<uint8_t>(seq_ >> (8 * i));
    protocol::auth_mac out{};
    size_t n = 0;
    // A null key restarts the HMAC with the key set at construction.
    if (EVP_MAC_init(as_ctx(ctx_), nullptr, 0, nullptr) != 1 || EVP_MAC_update(as_ctx(ctx_), seq, sizeof(seq)) != 1 ||
        EVP_MAC_update(as_ctx(ctx_), frame.data(), frame.size()) != 1 ||
        EVP_MAC_final(as_ctx(ctx_), out.data(), &n, out.size()) != 1 || n != out.size()) {
        return make_error(error_code::internal, "cannot compute a frame MAC");
    }
    ++seq_;
    return out;
}

status frame_mac::open(std::span<const uint8_t> frame, const protocol::auth_mac & tag) {
    const uint64_t seq = seq_;
    SKIPPY_ASSIGN_OR_RETURN(protocol::auth_mac want, seal(frame));
    if (!macs_equal(want, tag)) {
        seq_ = seq;
        return make_error(error_code::integrity, "frame " + std::to_string(seq) +
                                                     " has a wrong MAC (forged, replayed, reordered or altered)");
    }
    return status::ok();
}

bool is_loopback_host(const std::string & host) {
    if (host == "localhost") return true;
    in_addr v4{};
    if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
    in6_addr v6{};
    if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
    return false;  // any other name may resolve anywhere
}

status check_stage_auth(const topology & topo, const std::string & stage_key, bool tls) {
    if (!stage_key.empty() || tls) return status::ok();
    for (const stage_spec & s : topo.stages) {
        if (!is_loopback_host(s.address.host)) {
            return make_error(error_code::invalid_argument,
                              "stage endpoint " + s.address.to_string() +
                                  " is not loopback: stage links that leave this machine must be authenticated; give every "
                                  "stage process the same --stage-key-file (or --stage-tls certificates of one CA)");
        }
    }
    return status::ok();
}

std::string stage_auth_summary(const std::string & stage_key, bool tls) {
    const std::string key = stage_key.empty() ? "no stage key" : "authenticated (HMAC-SHA256 stage key)";
    if (tls) return "TLS 1.3 with mutual certificates, " + key;
    return stage_key.empty() ? "not authenticated (no --stage-key-file)" : key;
}

}  // namespace skippy::transport
