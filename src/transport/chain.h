// Stage 0: the pipeline_i that generate and serve drive (DESIGN §2, docs/transport.md).
//
// Stage 0 runs its own layers (all of them when the chain has one stage, in which case
// it also samples). Its lanes hand their prompts and decode tokens to one
// lane_scheduler, which runs them in steps (decode batched across lanes, prompts
// chunked beside it) and sends each step to stage 1 as one Step frame on the batch
// link (credit-windowed, so stage k runs step t while stage k-1 runs step t+1).
// Predicted tokens come back from the final stage on each lane's direct return link,
// which the final stage dials into stage 0's endpoint; control messages (configure,
// cache restores, stop) travel on each lane's own forward link.
//
// Prefix cache (DESIGN §6): at begin() stage 0 probes its own cache and then the
// chain's, and restores the longest prefix every stage holds — on all stages or none,
// rolling back on any miss — so prefill starts after it. When the whole prompt but
// its last token is cached, the restore rides on the first decode
// (TryRestorePrefillDecode), one trip down the chain; a miss there falls back to a
// full prefill inside decode().
//
// A lane whose links fail is marked broken: the request fails with the reason, and
// the next begin() on that lane reconnects the chain. Idle lanes (between end() and
// the next begin()) are watched by a thread that sends heartbeats on their forward
// links and takes what arrives on them: a close (a stage restarted or died), an Error,
// or a heartbeat unanswered within step_base marks the lane broken, so it is re-dialed
// before it takes a request. A request that fails before its first token because a connection was lost (while
// the lane is configured, during prefill, at the first decode) is run once more on a
// fresh lane (retry_before_first_token). Replies wait at most their step budget
// (liveness.h), so a stuck stage fails the requests on it with `timed_out`.
#pragma once

#include "runtime/pipeline.h"
#include "runtime/scheduler.h"
#include "runtime/step.h"
#include "transport/batch_link.h"
#include "transport/lane_session.h"
#include "transport/stage_server.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace skippy::transport {

class chain_pipeline final : public pipeline_i {
public:
    // REQUIRES: stage0 runs topo.stages[0].layers; with more than one stage,
    // return_listener is bound to stage 0's endpoint (or any port for in-process chains,
    // with topo updated to match). `cache` was created for stage0 (null: no cache).
    chain_pipeline(std::unique_ptr<stage> stage0, std::unique_ptr<stage_cache_host> cache, topology topo,
                   tcp_listener return_listener, const chain_options & options);
    ~chain_pipeline() override;

    int32_t n_lanes() const override { return stage_->n_lanes(); }
    int32_t ctx_size() const override { return stage_->ctx_size(); }
    int32_t n_vocab() const override { return stage_->hparams().n_vocab; }
    status begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                 std::string_view cache_key) override;
    status prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) override;
    result<token_id> decode(int32_t lane, int64_t pos, token_id token) override;
    const token_logprobs & last_logprobs(int32_t lane) const override;
    void end(int32_t lane) override;
    status prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool decodes) override;
    int64_t cached_tokens(int32_t lane) const override;
    cache_stage_masks cache_masks(int32_t lane) const override;
    // Yes for a lost connection (peer_closed, unavailable), never for timed_out or a
    // failure of the request; the next begin() keeps re-dialing the lane for up to
    // chain_options::retry_wait while a stage is still restarting.
    bool retry_before_first_token(int32_t lane, const status & failure) override;

    // Stats merged along the chain for the lane's current (or last) request: cache hits
    // and records with their stage masks, compute maxima.
    protocol::stats_block last_stats(int32_t lane) const;
    int32_t n_stages() const { return topo_.n_stages(); }
    // The steps in flight that the decoding lanes are spread over (scheduler_options).
    int32_t micro_batches() const { return scheduler_->options().micro_batches; }
    stage_cache_host * cache_host() { return cache_.get(); }
    // Blocks until the caches of the stages in this process (stage 0 and in-process
    // stages) have stored every record handed to their workers, so the next request
    // finds them (generate --prompts-file between prompts). Stages in other processes
    // are not waited for: their lookups wait for their own queued records (bounded).
    void wait_for_records();
    // Liveness counters (docs/transport.md, "Liveness"): idle lanes found closed by
    // their peer and re-dialed before use; requests run again on a fresh lane after a
    // failure before their first token. Thread-safe.
    int64_t n_stale_redials() const { return n_stale_redials_.load(); }
    int64_t n_retries() const { return n_retries_.load(); }
    // Heartbeats stage 0 sent on its batch link to stage 1, and batch links it closed
    // because one went unanswered.
    int64_t n_heartbeats_sent() const { return batch_ ? batch_->n_heartbeats_sent() : 0; }
    int64_t n_heartbeat_failures() const { return batch_ ? batch_->n_heartbeat_failures() : 0; }
    // Heartbeats sent on idle lanes' forward links, and idle lanes marked broken because
    // one went unanswered or a stage below reported a timeout of its own heartbeat (or
    // of anything else) on the lane. Closes found on idle lanes count as stale redials.
    int64_t n_lane_heartbeats_sent() const { return n_lane_heartbeats_sent_.load(); }
    int64_t n_lane_heartbeat_failures() const { return n_lane_heartbeat_failures_.load(); }

    // /metrics snapshots of the stages in this process (stage 0 and in-process stages;
    // external stage processes are not visible here). Thread-safe.
    std::vector<telemetry::stage_snapshot> stage_snapshots();

    // Stage servers this pipeline owns and stops on destruction (in-process chains).
    void own_servers(std::vector<std::unique_ptr<stage_server>> servers) { servers_ = std::move(servers); }
    const std::vector<std::unique_ptr<stage_server>> & servers() const { return servers_; }

private:
    struct lane_state;

    void run_step(std::span<step_item> items);
    void on_batch_failure(const status & reason, const std::vector<int32_t> & lanes);
    status lane_failure(lane_state & ls, const status & fallback);
    void accept_loop();
    void register_return_link(handshake_pool::pending & p);
    status fail_lane(int32_t lane, const status & st);
    status ensure_connected(int32_t lane);
    void liveness_loop();
    void watch_idle_lane(lane_state & ls);
    status check_idle_lane(lane_state & ls, bool may_send);
    void drop_idle_lane(lane_state & ls, const status & why);
    void close_links(lane_state & ls);  // marks the lane broken
    status configure_lane(lane_state & ls, const sampling_config & sampling, std::string_view cache_key);
    status upstream_reason(lane_state & ls, const status & fallback);
    status roundtrip(lane_state & ls, protocol::request req, protocol::reply & reply, const std::function<void()> & meanwhile = {});
    protocol::request make_request(lane_state & ls, protocol::message_kind kind, int64_t pos_start) const;
    status prefill_range(int32_t lane, int64_t pos_start, std::span<const token_id> tokens, int32_t chunk_tokens);
    result<token_id> decode_with_restore(int32_t lane, int64_t pos, token_id token);
    result<token_id> wait_for_token(int32_t lane, uint64_t request_id);
    bool logprobs_in_vocab(const token_logprobs & lp) const;
    bool single_stage() const { return topo_.n_stages() == 1; }

    std::unique_ptr<stage>                     stage_;
    std::unique_ptr<stage_cache_host>          cache_;
    topology                                   topo_;
    tcp_listener                               listener_;
    chain_options                              options_;
    std::vector<std::unique_ptr<lane_state>>   lanes_;
    std::atomic<bool>                          stopping_{false};
    std::atomic<int64_t>                       n_stale_redials_{0};
    std::atomic<int64_t>                       n_retries_{0};
    std::atomic<int64_t>                       n_lane_heartbeats_sent_{0};
    std::atomic<int64_t>                       n_lane_heartbeat_failures_{0};
    std::thread                                acceptor_;
    // Watches idle lanes (liveness_loop); woken to stop.
    std::thread                                liveness_;
    std::mutex                                 liveness_mutex_;
    std::condition_variable                    liveness_cv_;
    handshake_pool                             handshakes_;
    std::vector<std::unique_ptr<stage_server>> servers_;
    // The lane loop: run on the scheduler thread.
    step_runner                                runner_;
    std::unique_ptr<session_lanes>             sessions_;
    uint64_t                                   next_step_id_ = 1;
    std::unique_ptr<batch_link>                batch_;  // to stage 1 (null with one stage)
    telemetry::step_recorder                   steps_;
    std::unique_ptr<lane_scheduler>            scheduler_;
};

// The stage options a chain's stage needs (pool room for cached prefixes included).
stage_options stage_options_for(const stage_options & base, layer_range layers, const cache_settings & cache);

// `generate --stages N` and `serve --stages N`: N stages in this process, connected
// over loopback TCP with the real protocol (no function-call shortcut). Layers are
// split evenly; every stage gets `options`, and they all run on one shared pool of
// options.n_threads threads: stages mostly take turns (decode visits them one after
// another), and separate pools would fight for the cores.
result<std::unique_ptr<chain_pipeline>> make_embedded_chain(std::shared_ptr<const gguf::file> file, int32_t n_stages,
                                                            const stage_options & options, const chain_options & chain);
// The same with the stages' layer ranges given (contiguous, from 0 to the model's
// n_layer; invalid_argument otherwise): a chain split where a test wants it, e.g. at
// the border of a hybrid model's recurrent and attention layers.
result<std::unique_ptr<chain_pipeline>> make_embedded_chain(std::shared_ptr<const gguf::file> file, std::span<const layer_range> layers,
                                                            const stage_options & options, const chain_options & chain);

// `generate --topology T.json`: stage 0 here, the other stages are external processes.
result<std::unique_ptr<chain_pipeline>> make_topology_chain(std::shared_ptr<const gguf::file> file, const topology & topo,
                                                            const stage_options & options, const chain_options & chain);

}  // namespace skippy::transport
