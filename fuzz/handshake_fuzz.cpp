// libFuzzer target for the listener side of the stage-link handshake (src/transport:
// answer_hello, then read_first_request as stage 0 runs it for a return link).
//
// One source, two programs:
//   (default)                     handshake_fuzz: the fuzzer
//   SKIPPY_HANDSHAKE_FUZZ_SEEDS   handshake_fuzz_seeds DIR: writes seeds
//
// Input: one flags byte, then the dialer's bytes. Each input runs twice over a
// socketpair, once on a listener without a stage key and once with one. With the key
// and flag bit 0, the fuzzer dials honestly: it sends the input's first hello_bytes as
// the hello, checks the listener's proof, answers with the right proof and sends the
// rest of the input after it (bit 1: as one frame with its MAC, so the frame checks
// past the handshake are reached too). Otherwise the input is sent as it is, then the
// dialer's side is shut for writing. Beyond "no crash, no sanitizer report":
//   - the listener returns within its handshake deadline (plus slack), whatever arrives
//     (an input late once is run again: it fails when late twice in a row);
//   - with a key, an input sent as it is is never accepted, and the accept callback
//     (lane and link-kind checks) never runs: nothing without a proof of the key over
//     the listener's fresh nonce gets that far, so no lane can be taken over;
//   - with a key, an accepted link has MACs on, and the listener's challenge proves the
//     key; without one, an accepted link is unauthenticated and its hello says so;
//   - whatever the listener wrote back starts with a hello_reply that decodes.
#include "protocol/protocol.h"

#if !defined(SKIPPY_HANDSHAKE_FUZZ_SEEDS)
#include "transport/link.h"
#include "transport/link_auth.h"
#include "transport/socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>
#else
#include "seed_files.h"

#include <cstdio>
#include <string>
#include <vector>
#endif

namespace {

using namespace skippy;
using namespace skippy::protocol;

#if !defined(SKIPPY_HANDSHAKE_FUZZ_SEEDS)

#define FUZZ_CHECK(cond)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            std::fprintf(stderr, "handshake_fuzz: check failed: %s (%s:%d)\n", #cond, __FILE__, \
                         __LINE__);                                                             \
            std::abort();                                                                       \
        }                                                                                       \
    } while (0)

constexpr char k_stage_key[] = "fuzz-stage-key-0123456789abcdef";
constexpr auto k_handshake_timeout = std::chrono::milliseconds(300);
// Thread start-up and sanitizer slowness on a loaded machine; a hang is far beyond.
constexpr auto k_return_slack = std::chrono::milliseconds(2000);
constexpr uint32_t k_n_lanes = 4;
constexpr uint32_t k_final_stage = 2;

struct listener_outcome {
    bool                               accept_called = false;
    std::optional<result<transport::accepted_link>> accepted;
    std::optional<result<request>>     first_request;
};

// What stage 1 of a 3-stage chain (forward and batch links from stage 0) and stage 0
// (return links from the final stage) accept, in one callback.
status accept_like_a_stage(const hello & h) {
    if (h.lane >= k_n_lanes) return make_error(error_code::invalid_argument, "no such lane");
    if (h.link == link_kind::batch && h.lane != 0) return make_error(error_code::invalid_argument, "batch links name lane 0");
    const uint32_t sender = h.link == link_kind::direct_return ? k_final_stage : 0;
    if (h.sender_stage != sender) return make_error(error_code::invalid_argument, "wrong sender stage");
    return status::ok();
}

void run_listener(transport::tcp_socket & socket, const transport::link_options & options, listener_outcome & out) {
    out.accepted = transport::answer_hello(socket, options, [&](const hello & h) {
        out.accept_called = true;
        return accept_like_a_stage(h);
    });
    if (!out.accepted->is_ok() || (*out.accepted)->hello.link != link_kind::direct_return) return;
    out.first_request = transport::read_first_request(socket, options, (*out.accepted)->macs.recv,
                                                      transport::clock::now() + options.handshake_timeout);
}

// The dialer's half with the key: the hello, the listener's answer, the right proof,
// then `rest` (sealed as the first frame when `seal`). Returns whether the proof was
// sent (the listener said go on and proved the key).
bool dial_honestly(transport::tcp_socket & socket, std::span<const uint8_t> hello_wire, std::span<const uint8_t> rest,
                   bool seal, const protocol_limits & limits) {
    const auto deadline = transport::clock::now() + k_handshake_timeout + k_return_slack;
    if (!socket.write_all(hello_wire, deadline).is_ok()) return false;
    // A short hello gets no answer until the listener's deadline: end it now instead.
    if (hello_wire.size() < hello_bytes) ::shutdown(socket.fd(), SHUT_WR);
    std::vector<uint8_t> reply(hello_reply_fixed_bytes);
    if (!socket.read_exact(reply, deadline).is_ok()) return false;
    auto n = peek_hello_reply_length(reply, limits);
    FUZZ_CHECK(n.is_ok());
    reply.resize(*n);
    if (!socket.read_exact(std::span<uint8_t>(reply).subspan(hello_reply_fixed_bytes), deadline).is_ok()) return false;
    auto decoded = decode_hello_reply(reply, limits);
    FUZZ_CHECK(decoded.is_ok());
    if (decoded->status != hello_status::ok) return false;
    // Go on is only said to a well-formed hello that asked for this key's auth.
    FUZZ_CHECK(hello_wire.size() == hello_bytes);
    std::vector<uint8_t> bytes(auth_challenge_bytes);
    if (!socket.read_exact(bytes, deadline).is_ok()) return false;
    auto challenge = decode_auth_challenge(bytes);
    FUZZ_CHECK(challenge.is_ok());
    FUZZ_CHECK(transport::macs_equal(
        challenge->proof, transport::handshake_proof(k_stage_key, transport::link_role::listener, hello_wire, challenge->nonce)));
    const auth_mac proof = transport::handshake_proof(k_stage_key, transport::link_role::dialer, hello_wire, challenge->nonce);
    if (!socket.write_all(proof, deadline).is_ok()) return true;
    std::vector<uint8_t> frame(rest.begin(), rest.end());
    if (seal) {
        transport::link_macs macs =
            transport::derive_link_macs(k_stage_key, transport::link_role::dialer, hello_wire, challenge->nonce);
        auto tag = macs.send.seal(frame);
        FUZZ_CHECK(tag.is_ok());
        frame.insert(frame.end(), tag->begin(), tag->end());
    }
    (void)socket.write_all(frame, deadline);
    return true;
}

// The listener's bytes left on the dialer's side (after the listener closed its end).
std::vector<uint8_t> drain(transport::tcp_socket & socket) {
    std::vector<uint8_t> all;
    uint8_t chunk[4096];
    for (;;) {
        const ssize_t n = ::recv(socket.fd(), chunk, sizeof(chunk), MSG_DONTWAIT);
        if (n <= 0) break;
        all.insert(all.end(), chunk, chunk + n);
    }
    return all;
}

void check_replies(const std::vector<uint8_t> & bytes, const protocol_limits & limits) {
    if (bytes.empty()) return;  // not our protocol at all: closed without a word
    FUZZ_CHECK(bytes.size() >= hello_reply_fixed_bytes);
    auto n = peek_hello_reply_length(std::span<const uint8_t>(bytes).first(hello_reply_fixed_bytes), limits);
    FUZZ_CHECK(n.is_ok() && *n <= bytes.size());
    FUZZ_CHECK(decode_hello_reply(std::span<const uint8_t>(bytes).first(*n), limits).is_ok());
}

// The listener's side runs on one thread kept for the whole run. A thread per input
// grew the fuzzer's RSS by about 370 MB per million inputs: ASan (clang 14) keeps the
// context of every thread that ever ran (about 190 bytes each), so a 10M-input run
// crossed -rss_limit_mb.
class listener_thread {
public:
    // Never destroyed (see instance()): a joinable std::thread at exit would terminate.
    static listener_thread & instance() {
        static listener_thread * thread = new listener_thread;
        return *thread;
    }

    // Runs `job` on the thread; wait() returns once it has finished.
    void start(std::function<void()> job) {
        std::lock_guard lock(mutex_);
        FUZZ_CHECK(!job_ && !running_);
        job_ = std::move(job);
        changed_.notify_all();
    }

    void wait() {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !job_ && !running_; });
    }

private:
    listener_thread() : thread_([this] { loop(); }) {}

    void loop() {
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock lock(mutex_);
                changed_.wait(lock, [&] { return static_cast<bool>(job_); });
                job = std::move(job_);
                job_ = nullptr;
                running_ = true;
            }
            job();
            std::lock_guard lock(mutex_);
            running_ = false;
            changed_.notify_all();
        }
    }

    std::mutex              mutex_;
    std::condition_variable changed_;
    std::function<void()>   job_;
    bool                    running_ = false;
    std::thread             thread_;  // last: starts once the members above exist
};

// Returns whether the listener returned within its deadline plus slack; every other
// check fails here.
bool run_once(std::span<const uint8_t> input, uint8_t flags, bool keyed) {
    int fds[2];
    FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    transport::tcp_socket listener_end(fds[0]);
    transport::tcp_socket dialer_end(fds[1]);
    transport::link_options options;
    options.handshake_timeout = k_handshake_timeout;
    options.frame_timeout = k_handshake_timeout;
    if (keyed) options.stage_key = k_stage_key;

    listener_outcome out;
    const auto start = transport::clock::now();
    listener_thread & listener = listener_thread::instance();
    listener.start([&] {
        run_listener(listener_end, options, out);
        listener_end.shutdown();  // the dialer's reads end here
    });
    const bool honest = keyed && (flags & 1) != 0;
    bool proof_sent = false;
    if (honest) {
        const size_t n_hello = std::min(input.size(), hello_bytes);
        proof_sent = dial_honestly(dialer_end, input.first(n_hello), input.subspan(n_hello), (flags & 2) != 0, options.limits);
    } else {
        // The input fits the socket buffer (-max_len), so this cannot block the listener.
        (void)dialer_end.write_all(input, start + k_handshake_timeout + k_return_slack);
    }
    ::shutdown(dialer_end.fd(), SHUT_WR);
    listener.wait();
    const bool in_time = transport::clock::now() - start < k_handshake_timeout + k_return_slack;
    FUZZ_CHECK(out.accepted.has_value());
    if (!honest) check_replies(drain(dialer_end), options.limits);

    const result<transport::accepted_link> & accepted = *out.accepted;
    if (accepted.is_ok()) {
        FUZZ_CHECK(out.accept_called);
        FUZZ_CHECK(accept_like_a_stage(accepted->hello).is_ok());
        FUZZ_CHECK(accepted->macs.on() == keyed);
        FUZZ_CHECK(accepted->hello.auth == (keyed ? link_auth::hmac_sha256 : link_auth::none));
    } else {
        FUZZ_CHECK(!accepted.error().message().empty());
    }
    if (keyed) {
        // Without the proof nothing is decided: no lane check, no acceptance.
        FUZZ_CHECK(proof_sent || !out.accept_called);
        FUZZ_CHECK(proof_sent || !accepted.is_ok());
    }
    if (out.first_request && out.first_request->is_ok()) {
        FUZZ_CHECK(validate_request(**out.first_request, options.limits).is_ok());
    }
    return in_time;
}

// The deadline check is wall-clock time, which a loaded machine can stretch for a
// low-priority fuzzer (it fired once while other jobs held both cores; the input then
// ran in 6 ms). A listener that ignores its deadline is late every time: an input is
// a failure only when it is late twice in a row.
void run_checked(std::span<const uint8_t> input, uint8_t flags, bool keyed) {
    if (run_once(input, flags, keyed)) return;
    const bool in_time_again = run_once(input, flags, keyed);
    FUZZ_CHECK(in_time_again);  // the listener outlived its handshake deadline twice
}

#endif  // !SKIPPY_HANDSHAKE_FUZZ_SEEDS

}  // namespace

#if !defined(SKIPPY_HANDSHAKE_FUZZ_SEEDS)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size == 0) return 0;
    const uint8_t flags = data[0];
    const std::span<const uint8_t> input(data + 1, size - 1);
    run_checked(input, flags, false);
    run_checked(input, flags, true);
    return 0;
}

#else

namespace {

bool write_seed(const std::string & path, uint8_t flags, const std::vector<uint8_t> & bytes) {
    std::string all(1, static_cast<char>(flags));
    all.append(bytes.begin(), bytes.end());
    return fuzz_seeds::write_seed_file(path, all);
}

}  // namespace

// A valid hello for each link kind, unauthenticated and keyed; the keyed ones also for
// the honest dialer (flag 1), and a return link's hello followed by its opening frame
// (flags 3: sealed by the fuzzer; flags 0: sent bare, as an unauthenticated dialer would).
int main(int argc, char ** argv) {
    const char * dir_arg = fuzz_seeds::corpus_dir_arg(argc, argv);
    if (!dir_arg) return 2;
    const std::string dir = dir_arg;
    bool ok = true;
    int n = 0;
    struct kind_case {
        const char * name;
        link_kind    link;
        uint32_t     sender_stage;
    };
    const kind_case kinds[] = {{"forward", link_kind::forward, 0},
                               {"direct_return", link_kind::direct_return, 2},
                               {"batch", link_kind::batch, 0}};
    request open;
    open.kind = message_kind::prediction_return_open;
    open.request_id = 1;
    open.session_id = 1;  // lane 1, as the hello below names
    open.state.phase = message_phase::control;
    const std::vector<uint8_t> open_bytes = encode_request(open);
    for (const kind_case & k : kinds) {
        for (link_auth auth : {link_auth::none, link_auth::hmac_sha256}) {
            hello h;
            h.link = k.link;
            h.lane = k.link == link_kind::batch ? 0 : 1;
            h.sender_stage = k.sender_stage;
            h.auth = auth;
            if (auth != link_auth::none) {
                for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(0x40 + i);
            }
            std::vector<uint8_t> bytes = encode_hello(h);
            const std::string base = dir + "/hello_" + k.name + (auth == link_auth::none ? "_open" : "_keyed");
            ok &= write_seed(base, 0, bytes);
            ++n;
            if (auth != link_auth::none) {
                ok &= write_seed(base + "_honest", 1, bytes);
                std::vector<uint8_t> with_proof = bytes;
                with_proof.resize(with_proof.size() + auth_mac_bytes, 0x5a);  // a wrong proof
                ok &= write_seed(base + "_wrong_proof", 0, with_proof);
                n += 2;
            }
            if (k.link == link_kind::direct_return) {
                bytes.insert(bytes.end(), open_bytes.begin(), open_bytes.end());
                ok &= write_seed(base + "_open_frame", auth == link_auth::none ? 0 : 3, bytes);
                ++n;
            }
        }
    }
    std::fprintf(stderr, "handshake_fuzz_seeds: wrote %d seeds to %s\n", n, dir.c_str());
    return ok ? 0 : 1;
}

#endif
