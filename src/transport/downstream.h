// The link a stage sends a lane's requests on to the next stage (docs/transport.md,
// "A request"): streamed requests (Prefill, Decode) within a credit window, synchronous
// ones (control, TryRestorePrefillDecode) once every streamed one before them is
// acknowledged. Stage 0 and every stage k >= 1 use the same one.
//
// Every reply waits at most its step budget (liveness.h): a streamed request's ack for
// its tokens and those queued ahead of it over one hop, a synchronous reply for its
// tokens over every hop below that answers it in turn (n_hops).
//
// An idle link (a lane between requests) is watched by heartbeats its owner drives with
// check_heartbeat: a Heartbeat after liveness.heartbeat_interval of quiet, whose Ack must
// come within step_base. The Ack is taken by whichever read comes next.
#pragma once

#include "transport/link.h"

#include <deque>
#include <functional>
#include <mutex>

namespace skippy::transport {

class downstream_link {
public:
    // Dials the next stage and completes the handshake (called when not connected).
    using dial_fn = std::function<result<stage_link>()>;

    // REQUIRES: credit_window >= 1, n_hops >= 1 (the stages a synchronous request
    // travels through before its reply comes back: the next stage and those below it).
    downstream_link(dial_fn dial, int32_t credit_window, int32_t n_hops = 1)
        : dial_(std::move(dial)), credit_window_(credit_window), n_hops_(n_hops) {}

    // Dials when there is no connection; a fresh connection has nothing outstanding.
    status ensure_connected();
    bool connected() const { return link_.connected(); }
    int fd() const { return link_.fd(); }
    const std::string & peer_name() const { return link_.peer_name(); }
    int32_t outstanding() const { return static_cast<int32_t>(outstanding_.size()); }
    stage_link & link() { return link_; }

    void close();
    // Wakes a thread blocked on the link (its reads fail). Thread-safe against the
    // owner's connect and close.
    void shutdown();

    // Reads one reply, waiting until `deadline` for it to begin: an Ack of a streamed
    // request returns credit; the Ack of a pending Heartbeat clears it; the reply to
    // `want_id` goes to *out (when out is given); an Error reply is returned as its
    // status; anything else is invalid_data; no reply by the deadline is timed_out.
    status read_one(uint64_t want_id, protocol::reply * out, clock::time_point deadline);
    // For a reply already arriving (the socket polled readable).
    status read_one(uint64_t want_id, protocol::reply * out) { return read_one(want_id, out, link_.frame_deadline()); }

    // Connects if needed, waits for credit, sends. PROMISES: *forward_us is the time
    // from the call to the frame being written (docs/protocol.md, max_forward_us).
    status send_streamed(const protocol::request & r, uint32_t * forward_us);

    // Connects if needed, waits until every streamed request is acknowledged, sends `r`
    // and reads its reply. *forward_us as for send_streamed (the reply is not counted).
    // `meanwhile`, when given, runs once `r` is sent and before its reply is read (work
    // of this stage that overlaps the stages below); it runs only if the send succeeded.
    status roundtrip(const protocol::request & r, protocol::reply & reply, uint32_t * forward_us,
                     const std::function<void()> & meanwhile = {});

    // For a connected link that is idle (nothing outstanding, and the owner has no
    // request of its own in progress on it): sends a Heartbeat once the link has been
    // quiet for liveness.heartbeat_interval (when `may_send`; *sent says whether it
    // did), and returns timed_out when one has gone unanswered for step_base (the peer
    // froze or is unreachable: the owner closes the link). Not connected, or heartbeats
    // off (interval 0): ok. The owner reads the Ack (read_one) when the link is readable.
    status check_heartbeat(clock::time_point now, bool may_send, bool * sent = nullptr);

private:
    dial_fn         dial_;
    const int32_t   credit_window_;
    std::mutex      mutex_;  // link_ against shutdown() from other threads
    stage_link      link_;
    struct pending_ack {
        int64_t           n_tokens;
        clock::time_point ack_deadline;
    };
    // The credit wait for the oldest streamed request.
    status read_oldest_ack();
    // What read_frame took.
    enum class taken { reply, ack, heartbeat_ack };
    // read_one, saying what it read (*what) and, on failure, whether nothing arrived by
    // `deadline` (*our_deadline, as opposed to an Error reply, which may carry a timeout
    // a stage below reported).
    status read_frame(uint64_t want_id, protocol::reply * out, clock::time_point deadline, taken * what, bool * our_deadline);

    const int32_t   n_hops_;
    std::deque<pending_ack> outstanding_;  // streamed requests not acknowledged yet, oldest first
    // Reset on every connect; fed by every frame sent or read.
    heartbeat_monitor heartbeat_{std::chrono::milliseconds(0), std::chrono::milliseconds(1), clock::now()};
};

}  // namespace skippy::transport
