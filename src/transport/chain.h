// Stage 0 of a chain: the pipeline_i that generate and serve drive when the model is
// split (DESIGN §2). Stage 0 runs its own layers, streams prefill chunks and decode
// steps to stage 1 over each lane's forward link (credit-windowed, so stage k works
// on chunk i while stage k-1 computes chunk i+1), and receives predicted tokens from
// the final stage on the lane's direct return link, which the final stage dials into
// stage 0's endpoint.
//
// A lane whose links fail is marked broken: the request fails with the reason, and
// the next begin() on that lane reconnects the chain.
#pragma once

#include "runtime/pipeline.h"
#include "transport/stage_server.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::transport {

class chain_pipeline final : public pipeline_i {
public:
    // REQUIRES: stage0 runs topo.stages[0].layers; return_listener is bound to stage
    // 0's endpoint (or any port for in-process chains, with topo updated to match).
    chain_pipeline(std::unique_ptr<stage> stage0, topology topo, tcp_listener return_listener, const chain_options & options);
    ~chain_pipeline() override;

    int32_t n_lanes() const override { return stage_->n_lanes(); }
    int32_t ctx_size() const override { return stage_->ctx_size(); }
    int32_t n_vocab() const override { return stage_->hparams().n_vocab; }
    status begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens) override {
        return begin(lane, sampling, prompt_tokens, "");
    }
    status begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                 std::string_view cache_key) override;
    status prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) override;
    result<token_id> decode(int32_t lane, int64_t pos, token_id token) override;
    void end(int32_t lane) override;

    // Stats merged along the chain for the lane's last predicted token.
    protocol::stats_block last_stats(int32_t lane) const;

    // Stage servers this pipeline owns and stops on destruction (in-process chains).
    void own_servers(std::vector<std::unique_ptr<stage_server>> servers) { servers_ = std::move(servers); }

private:
    struct lane_state {
        stage_link            forward;
        int32_t               outstanding = 0;
        uint64_t              next_request_id = 1;
        bool                  broken = true;  // (re)connect on the next begin()
        std::vector<float>    hidden;
        protocol::stats_block last_stats;
        int32_t               decode_step = 0;
        int32_t               prompt_tokens = 0;
        // Set by the acceptor thread, taken by the lane's user.
        std::mutex              return_mutex;
        std::condition_variable return_ready;
        std::unique_ptr<stage_link> return_link;
    };

    void accept_loop();
    status fail_lane(int32_t lane, const status & st);
    status ensure_connected(int32_t lane);
    status read_forward_reply(lane_state & ls, uint64_t want_id, protocol::reply * out);
    status upstream_reason(lane_state & ls, const status & fallback);
    status roundtrip(int32_t lane, protocol::request req, protocol::reply & reply);
    protocol::request make_request(lane_state & ls, protocol::message_kind kind, int64_t pos_start) const;
    status send_streamed(int32_t lane, protocol::request req);

    std::unique_ptr<stage>                   stage_;
    topology                                 topo_;
    tcp_listener                             listener_;
    chain_options                            options_;
    std::vector<std::unique_ptr<lane_state>> lanes_;
    std::atomic<bool>                        stopping_{false};
    std::thread                              acceptor_;
    std::vector<std::unique_ptr<stage_server>> servers_;
};

// `generate --stages N` and `serve --stages N`: N stages in this process, connected
// over loopback TCP with the real protocol (no function-call shortcut). Layers are
// split evenly; every stage gets `options`, threads included: stages mostly take turns
// (decode visits them one after another), and an idle stage's workers sleep.
result<std::unique_ptr<pipeline_i>> make_embedded_chain(std::shared_ptr<const gguf::file> file, int32_t n_stages,
                                                        const stage_options & options, const chain_options & chain);

// `generate --topology T.json`: stage 0 here, the other stages are external processes.
result<std::unique_ptr<pipeline_i>> make_topology_chain(std::shared_ptr<const gguf::file> file, const topology & topo,
                                                        const stage_options & options, const chain_options & chain);

}  // namespace skippy::transport
