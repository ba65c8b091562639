// Authentication of stage links (docs/protocol.md, "Authentication"): a shared stage
// key proves both ends to each other in the handshake (challenge-response, HMAC-SHA256
// over both sides' nonces; the key never crosses the wire), and keys derived from that
// handshake put a MAC with an implicit sequence number after every frame, so frames
// cannot be replayed (within or across sessions), reordered, dropped or injected.
#pragma once

#include "base/status.h"
#include "protocol/protocol.h"
#include "transport/topology.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace skippy::transport {

// Shortest stage key we accept, in bytes (after trailing whitespace is trimmed).
inline constexpr size_t min_stage_key_bytes = 16;

// Reads a stage key file: its bytes, trailing whitespace (a final newline) removed.
// invalid_argument when it cannot be read or the key is shorter than
// min_stage_key_bytes; the message never contains key bytes.
result<std::string> load_stage_key(const std::string & path);

// Bytes from the system's CSPRNG. `internal` when it fails (no usable entropy).
result<protocol::auth_nonce> random_nonce();

// Constant-time comparison of two MACs.
bool macs_equal(const protocol::auth_mac & a, const protocol::auth_mac & b);

enum class link_role { dialer, listener };

// The proof `who` sends in the handshake: HMAC-SHA256(key, label(who) || hello bytes ||
// listener nonce). Binding both nonces makes a recorded proof useless in any other
// handshake. REQUIRES: !key.empty().
protocol::auth_mac handshake_proof(std::string_view key, link_role who, std::span<const uint8_t> hello_bytes,
                                   const protocol::auth_nonce & listener_nonce);

// One direction of an authenticated link: an HMAC key and the next sequence number.
class frame_mac {
public:
    frame_mac() = default;
    explicit frame_mac(const protocol::auth_mac & key);
    ~frame_mac();
    frame_mac(frame_mac && o) noexcept;
    frame_mac & operator=(frame_mac && o) noexcept;
    frame_mac(const frame_mac &) = delete;
    frame_mac & operator=(const frame_mac &) = delete;

    bool on() const { return ctx_ != nullptr; }
    uint64_t next_seq() const { return seq_; }
    // The MAC of `frame` as the next frame of this direction: HMAC(key, u64 seq LE ||
    // frame). Advances the sequence number. `internal` if the MAC cannot be computed
    // (OpenSSL out of memory). REQUIRES: on().
    result<protocol::auth_mac> seal(std::span<const uint8_t> frame);
    // Checks `tag` against the next frame's MAC; integrity error when it differs (a
    // forged, replayed, reordered or altered frame). Advances the sequence number only
    // on success (the link is closed after a failure anyway). REQUIRES: on().
    status open(std::span<const uint8_t> frame, const protocol::auth_mac & tag);

private:
    void *   ctx_ = nullptr;  // EVP_MAC_CTX, keyed
    uint64_t seq_ = 0;
};

// Both directions of a link, from the side `me` plays. Off (both directions off) for
// an unauthenticated link.
struct link_macs {
    frame_mac send;
    frame_mac recv;
    bool on() const { return send.on(); }
};

// The frame keys of an authenticated link: HMAC-SHA256(key, direction label || hello
// bytes || listener nonce) for each direction. REQUIRES: !key.empty().
link_macs derive_link_macs(std::string_view key, link_role me, std::span<const uint8_t> hello_bytes,
                           const protocol::auth_nonce & listener_nonce);

// True for a numeric loopback address (127.0.0.0/8, ::1) or "localhost".
bool is_loopback_host(const std::string & host);

// The rule for a chain's links: a topology whose stages are all on loopback may run
// without authentication; one with any other endpoint needs `stage_key` or TLS (`tls`:
// mutual certificates, tls.h). invalid_argument, naming the endpoint, without either.
status check_stage_auth(const topology & topo, const std::string & stage_key, bool tls);

// How stage links are protected, for startup lines: "authenticated (HMAC-SHA256 stage
// key)", "TLS 1.3 with mutual certificates, authenticated (...)", "not authenticated
// (no --stage-key-file)", ...
std::string stage_auth_summary(const std::string & stage_key, bool tls);

}  // namespace skippy::transport
