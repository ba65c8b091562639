// A stage k >= 1 serving its lanes (skippy serve-stage, and the in-process stages of
// `generate --stages N`). docs/transport.md describes the message flow.
//
// Each lane is one forward connection from stage k-1 and one worker thread that owns
// the lane's session on this stage. The worker reads requests in order, computes,
// forwards downstream (non-final stages) with a bounded credit window, acks upstream,
// and on the final stage samples and sends predicted tokens straight to stage 0 over
// the lane's return link. With a prefix cache, control requests restore cached
// prefixes (all stages or none) and prefills record what they computed. Any failure
// sends an Error reply upstream and closes the lane's connections, which tears the
// lane down end to end; stage 0 rebuilds it.
#pragma once

#include "runtime/stage.h"
#include "transport/link.h"
#include "transport/stage_cache_host.h"
#include "transport/topology.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::transport {

class downstream_link;

struct chain_options {
    link_options   link;
    int32_t        credit_window = 4;  // streamed messages a sender may have unacknowledged
    cache_settings cache;              // every stage's prefix cache
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
    // Closes the listener and every lane connection and joins the threads.
    void stop();

    int32_t stage_index() const { return stage_index_; }
    uint16_t port() const { return listener_.port(); }
    stage_cache_host * cache_host() { return cache_.get(); }
    stage & model_stage() { return *stage_; }

private:
    struct lane_slot {
        std::mutex   start_mutex;  // serializes replacing the lane's worker (handshakes run concurrently)
        std::mutex   mutex;
        std::thread  worker;
        // Owned by the worker; shut down on replacement and at stop().
        stage_link *      upstream = nullptr;
        downstream_link * downstream = nullptr;
        stage_link *      returns = nullptr;
    };
    class lane_worker;

    void accept_loop();
    void start_lane(int32_t lane, stage_link upstream);

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
};

}  // namespace skippy::transport
