// A stage k >= 1 serving its lanes (skippy serve-stage, and the in-process stages of
// `generate --stages N`). docs/transport.md describes the message flow.
//
// Two kinds of connection come from stage k-1. Each lane has a forward link and a
// worker thread that handles its control messages in order (configure, cache probes
// and restores, trim, stop) and forwards them downstream. The batch link carries the
// lanes' steps: its worker runs each Step as one batch through the stage's layers,
// forwards it to stage k+1 as one Step (or, on the final stage, samples and sends each
// lane's token straight to stage 0 on the lane's return link) and acknowledges it.
// A lane's forward link may also carry its own Prefill and Decode requests; they run
// as steps of one lane. Any failure of a lane sends an Error reply upstream and closes
// the lane's connections, which tears the lane down end to end; stage 0 rebuilds it.
// A bad Step fails the batch link and every lane it may have held.
#pragma once

#include "runtime/scheduler.h"
#include "runtime/stage.h"
#include "runtime/step.h"
#include "transport/batch_link.h"
#include "transport/downstream.h"
#include "transport/lane_session.h"
#include "transport/link.h"
#include "transport/stage_cache_host.h"
#include "transport/topology.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::transport {


struct chain_options {
    link_options      link;
    int32_t           credit_window = 4;  // streamed messages (and steps) a sender may have unacknowledged
    cache_settings    cache;              // every stage's prefix cache
    // Stage 0's scheduler. micro_batches 0: one step in flight per stage of a chain of
    // separate processes, one for stages sharing this process's cores.
    scheduler_options schedule{.step_tokens = 64, .micro_batches = 0};
    // Stage 0: a request that lost a connection before its first token runs again on a
    // fresh lane, which is dialed every 100 ms for at most this long while connections
    // are refused or closed (a stage restarting) before the request fails.
    std::chrono::milliseconds retry_wait{5000};
};

class stage_server {
public:
    // REQUIRES: the stage runs topo.stages[stage_index].layers; stage_index >= 1;
    // `listener` is bound to that stage's endpoint (or any port, for in-process chains);
    // `cache` was created for this stage (or is null: no cache).
    stage_server(std::unique_ptr<stage> st, std::unique_ptr<stage_cache_host> cache, int32_t stage_index, topology topo,
                 tcp_listener listener, const chain_options & options);
    ~stage_server();
    stage_server(const stage_server &) = delete;
    stage_server & operator=(const stage_server &) = delete;

    void start();
    // Closes the listener and every connection and joins the threads.
    void stop();

    int32_t stage_index() const { return stage_index_; }
    uint16_t port() const { return listener_.port(); }
    stage_cache_host * cache_host() { return cache_.get(); }
    stage & model_stage() { return *stage_; }
    // What /metrics reports of this stage (cache tiers, KV pool, steps). Thread-safe.
    telemetry::stage_snapshot snapshot() { return stage_snapshot_of(stage_index_, *stage_, cache_.get(), &steps_); }

private:
    // One lane of this stage: its session (used by the lane's worker and by the batch
    // worker, never at once: both hold session_mutex), and the links other threads may
    // shut down or write an Error on.
    struct lane_slot {
        lane_slot(stage & st, stage_cache_host * cache, int32_t lane, int32_t stage_index) : session(st, cache, lane, stage_index) {}

        std::mutex   start_mutex;    // serializes replacing the lane's worker (handshakes run concurrently)
        std::thread  worker;
        std::mutex   session_mutex;  // the session, `configured`, writes on `returns`
        lane_session session;
        bool         configured = false;  // ConfigureGeneration seen: the lane's steps run
        std::mutex   mutex;               // the pointers below, `returns` and `failed`
        stage_link *      upstream = nullptr;    // owned by the worker
        downstream_link * downstream = nullptr;  // owned by the worker (non-final stages)
        stage_link        returns;               // the final stage: stage 0's return link
        bool              failed = false;        // this connection's Error was sent
        // Frames written on `upstream` and `returns` (acks and tokens by the lane's
        // threads, an Error by whichever thread fails the lane) never interleave.
        std::mutex        write_mutex;
    };
    class lane_worker;

    void accept_loop();
    void start_lane(int32_t lane, stage_link upstream);
    void start_batch(stage_link upstream);
    void batch_loop(stage_link & upstream);
    // Runs one Step (batch_link.h): problems of the frame itself are returned; a lane's
    // own failure fails that lane only.
    status run_step(protocol::step_frame & step, clock::time_point received_at);
    // Sends `why` upstream (and to stage 0 on the final stage) once per connection of
    // the lane, then shuts its links down: its worker ends and tears the lane down.
    void fail_lane(int32_t lane, uint64_t request_id, const status & why);
    void fail_all_lanes(const status & why);
    status send_token(lane_slot & slot, const protocol::reply & token);
    status connect_return(lane_slot & slot);

    std::unique_ptr<stage>            stage_;
    std::unique_ptr<stage_cache_host> cache_;
    int32_t                           stage_index_;
    topology                          topo_;
    tcp_listener                      listener_;
    chain_options                     options_;
    std::atomic<bool>                 stopping_{false};
    std::thread                       acceptor_;
    handshake_pool                    handshakes_;
    std::vector<std::unique_ptr<lane_slot>> lanes_;
    std::unique_ptr<session_lanes>    sessions_;
    // The batch link from stage k-1 and its worker; the one to stage k+1.
    std::mutex                        batch_start_mutex_;
    std::thread                       batch_worker_;
    std::mutex                        batch_mutex_;
    stage_link *                      batch_upstream_ = nullptr;  // owned by the batch worker
    step_runner                       batch_runner_;
    std::unique_ptr<batch_link>       batch_down_;
    telemetry::step_recorder          steps_;
};

}  // namespace skippy::transport
