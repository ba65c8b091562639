#include "transport/chain.h"

#include "base/log.h"
#include "transport/chain_restore.h"
#include "transport/convert.h"
#include "transport/downstream.h"
#include "transport/lane_session.h"
#include "transport/timing.h"

#include <optional>

namespace skippy::transport {

using protocol::message_kind;

struct chain_pipeline::lane_state final : chain_restore::chain_i {
    lane_state(chain_pipeline & owner, stage & st, stage_cache_host * host, int32_t lane, downstream_link::dial_fn dial)
        : self(owner), index(lane), session(st, host, lane, 0), forward(std::move(dial), owner.options_.credit_window, std::max(1, owner.topo_.n_stages() - 1)),
          restore(session, *this, owner.single_stage()) {}

    // chain_restore::chain_i
    protocol::request make_request(message_kind kind, int64_t pos_start) override { return self.make_request(*this, kind, pos_start); }
    status roundtrip(protocol::request req, protocol::reply & reply, const std::function<void()> & meanwhile) override {
        return self.roundtrip(*this, std::move(req), reply, meanwhile);
    }
    void add_counters(const cache::cache_counters & c) override { add_cache_counters(stats, c); }

    chain_pipeline &         self;
    const int32_t            index;
    lane_session             session;
    downstream_link          forward;  // to stage 1: this lane's control messages
    chain_restore            restore;
    uint64_t                 next_request_id = 1;
    bool                     broken = true;  // (re)connect on the next begin()
    // Whether a request holds the lane (begin() to end()). While none does, the
    // liveness thread may heartbeat the forward link and mark the lane broken; it
    // touches the lane only under idle_mutex with in_use false.
    std::mutex               idle_mutex;
    bool                     in_use = false;
    // The next begin() runs a request again after it failed before its first token
    // (retry_before_first_token): a stage may still be restarting.
    bool                     retrying = false;
    protocol::stats_block    stats;          // merged over the current request
    int32_t                  decode_step = 0;
    token_logprobs           logprobs;       // of the token the last decode returned
    int64_t                  n_prompt = 0;
    uint64_t                 decode_request_id = 0;  // of the lane's last decode entry (set by its step)
    // When the token of that decode is due back from the final stage (set by its step):
    // the step budget of the step and the steps queued ahead of it, over every hop.
    clock::time_point        token_deadline;
    // Set by the acceptor thread, taken by the lane's user.
    std::mutex                  return_mutex;
    std::condition_variable     return_ready;
    std::unique_ptr<stage_link> return_link;
    // Why the batch link failed while this lane had steps on it (set by its reader).
    std::mutex                  failure_mutex;
    std::optional<status>       batch_failure;
};

namespace {

constexpr int32_t k_fallback_chunk_tokens = 512;

// A connection of the chain closed, was refused or reset: a fresh lane may not meet
// it. Not a stuck stage (timed_out), nor anything about the request or the model.
bool lost_connection(const status & st) {
    return st.code() == error_code::peer_closed || st.code() == error_code::unavailable;
}

}  // namespace

chain_pipeline::chain_pipeline(std::unique_ptr<stage> stage0, std::unique_ptr<stage_cache_host> cache, topology topo,
                               tcp_listener return_listener, const chain_options & options)
    : stage_(std::move(stage0)), cache_(std::move(cache)), topo_(std::move(topo)), listener_(std::move(return_listener)),
      options_(options), handshakes_(options.link.max_pending_handshakes, options.link.max_pending_handshakes_per_address), runner_(*stage_) {
    for (int32_t i = 0; i < stage_->n_lanes(); ++i) {
        auto dial = [this, i]() -> result<stage_link> {
            protocol::hello h;
            h.link = protocol::link_kind::forward;
            h.lane = static_cast<uint32_t>(i);
            h.sender_stage = 0;
            const auto & ep = topo_.stages[1].address;
            return connect_link(ep, h, options_.link, "stage 1 (" + ep.to_string() + ")");
        };
        lanes_.push_back(std::make_unique<lane_state>(*this, *stage_, cache_.get(), i, std::move(dial)));
    }
    sessions_ = std::make_unique<session_lanes>([this](int32_t lane) { return &lanes_[static_cast<size_t>(lane)]->session; },
                                                !single_stage());
    scheduler_options schedule = options_.schedule;
    if (schedule.micro_batches == 0) schedule.micro_batches = 1;
    if (!single_stage()) {
        auto dial = [this]() -> result<stage_link> {
            protocol::hello h;
            h.link = protocol::link_kind::batch;
            h.sender_stage = 0;
            const auto & ep = topo_.stages[1].address;
            return connect_link(ep, h, options_.link, "stage 1 (" + ep.to_string() + ", steps)");
        };
        batch_ = std::make_unique<batch_link>(std::move(dial), options_.credit_window, stage_->n_lanes(),
                                              [this](const status & why, const std::vector<int32_t> & lanes) { on_batch_failure(why, lanes); });
    }
    scheduler_ = std::make_unique<lane_scheduler>(
        stage_->n_lanes(), schedule, [this](std::span<step_item> items) { run_step(items); },
        [this](const step_observation & seen) { steps_.observe(seen.n_lanes, seen.n_tokens, seen.queue_wait_s); });
    if (!single_stage()) {
        acceptor_ = std::thread([this] { accept_loop(); });
        liveness_ = std::thread([this] { liveness_loop(); });
    }
}

chain_pipeline::~chain_pipeline() {
    {
        std::lock_guard<std::mutex> lock(liveness_mutex_);
        stopping_.store(true);
    }
    liveness_cv_.notify_all();
    if (liveness_.joinable()) liveness_.join();
    scheduler_->stop();
    if (acceptor_.joinable()) acceptor_.join();
    listener_.close();
    handshakes_.stop();
    if (batch_) batch_->close();
    for (auto & ls : lanes_) ls->forward.close();
    servers_.clear();  // stops the in-process stages
}

// One step on the scheduler thread: stage 0's layers for every item as one batch,
// stage 0's cache bookkeeping, then (with more stages) the step as one frame to stage
// 1. With one stage the step sampled already.
void chain_pipeline::run_step(std::span<step_item> items) {
    for (step_item & it : items) {
        lane_state & ls = *lanes_[static_cast<size_t>(it.lane)];
        std::lock_guard<std::mutex> lock(ls.failure_mutex);
        if (ls.batch_failure) it.result = *ls.batch_failure;  // its earlier steps were lost: do not compute on
        it.request_id = ls.next_request_id++;  // the step entry's id, known to the cache events of the step
    }
    const auto t0 = clock::now();
    runner_.run(items, *sessions_);
    const uint32_t compute_us = micros_since(t0);
    protocol::step_frame step;
    step.step_id = next_step_id_++;
    for (step_item & it : items) {
        if (!it.result.is_ok()) continue;
        lane_state & ls = *lanes_[static_cast<size_t>(it.lane)];
        cache::cache_counters counters = ls.session.step_counters;
        if (it.kind == step_kind::prefill) {
            counters.merge(ls.session.cache().record_if_final(it.pos_start + static_cast<int64_t>(it.tokens.size()), false,
                                                              {it.request_id, message_kind::prefill}));
        }
        add_cache_counters(ls.stats, counters);
        if (single_stage()) continue;
        const bool decode = it.kind == step_kind::decode;
        protocol::step_entry e;
        const protocol::request shape = make_request(ls, decode ? message_kind::decode : message_kind::prefill, it.pos_start);
        e.kind = shape.kind;
        e.request_id = it.request_id;
        e.session_id = static_cast<uint64_t>(it.lane);
        e.pos_start = it.pos_start;
        e.state = shape.state;
        if (decode) {
            e.state.current_token = it.tokens.front();
            ls.decode_request_id = e.request_id;
        }
        // Stage 0's counters stay in ls.stats: the final stage's reply carries the merge
        // of the stages below, so sending them down would count them twice.
        e.stats.max_compute_us = compute_us;
        e.tokens.assign(it.tokens.begin(), it.tokens.end());
        const auto rows = runner_.rows(it);
        step.activation.values.insert(step.activation.values.end(), rows.begin(), rows.end());
        step.entries.push_back(std::move(e));
    }
    if (single_stage() || step.entries.empty()) return;
    step.source_stage = 0;
    step.activation.producer_stage = 0;
    step.activation.layer_start = static_cast<uint32_t>(stage_->slice().range().start);
    step.activation.layer_end = static_cast<uint32_t>(stage_->slice().range().end);
    step.activation.n_embd = static_cast<uint32_t>(stage_->hparams().n_embd);
    uint32_t forward_us = 0;
    int64_t n_tokens_queued = 0;
    const status st = batch_->send(step, &forward_us, &n_tokens_queued);
    const auto token_deadline = clock::now() + step_budget(options_.link.liveness, n_tokens_queued, topo_.n_stages() - 1);
    for (step_item & it : items) {
        if (!it.result.is_ok()) continue;
        if (!st.is_ok()) {
            it.result = st;
            continue;
        }
        if (it.kind == step_kind::decode) lanes_[static_cast<size_t>(it.lane)]->token_deadline = token_deadline;
        protocol::stats_block & stats = lanes_[static_cast<size_t>(it.lane)]->stats;
        stats.max_forward_us = std::max(stats.max_forward_us, forward_us);
    }
}

// The batch link to stage 1 failed with steps of these lanes on it: their requests
// fail with the reason. Shutting their forward links down wakes a lane waiting for a
// token.
void chain_pipeline::on_batch_failure(const status & reason, const std::vector<int32_t> & lanes) {
    SKIPPY_LOG_WARN("stage 0: the batch link to stage 1 failed: %s", reason.to_string().c_str());
    for (int32_t lane : lanes) {
        lane_state & ls = *lanes_[static_cast<size_t>(lane)];
        {
            std::lock_guard<std::mutex> lock(ls.failure_mutex);
            if (!ls.batch_failure) ls.batch_failure = reason;
        }
        ls.forward.shutdown();
    }
}

// The reason a lane failed: the batch link's, when that failed under it.
status chain_pipeline::lane_failure(lane_state & ls, const status & fallback) {
    std::lock_guard<std::mutex> lock(ls.failure_mutex);
    return ls.batch_failure ? *ls.batch_failure : fallback;
}

// Registers return links: the final stage dials stage 0 once per lane. Each
// handshake (hello, then PredictionReturnOpen) runs on a handshake thread, so a
// silent dialer cannot hold up the next one.
void chain_pipeline::accept_loop() {
    while (!stopping_.load()) {
        auto accepted = listener_.accept(std::chrono::milliseconds(100));
        if (!accepted.is_ok()) continue;
        const int64_t evicted = handshakes_.n_evicted();
        if (!handshakes_.start(std::move(accepted).value(), [this](handshake_pool::pending & p) { register_return_link(p); })) continue;
        if (handshakes_.n_evicted() > evicted) {
            SKIPPY_LOG_WARN("stage 0: too many pending handshakes: closed the oldest to make room");
        }
    }
}

void chain_pipeline::register_return_link(handshake_pool::pending & p) {
    const int32_t final_stage = topo_.n_stages() - 1;
    auto hello = answer_hello(p.socket(), options_.link, [&](const protocol::hello & h) -> status {
        if (h.link != protocol::link_kind::direct_return) return make_error(error_code::invalid_argument, "stage 0 takes return links only");
        if (h.lane >= static_cast<uint32_t>(lanes_.size())) return make_error(error_code::invalid_argument, "no such lane");
        if (h.sender_stage != static_cast<uint32_t>(final_stage)) {
            return make_error(error_code::invalid_argument, "only the final stage (" + std::to_string(final_stage) + ") returns tokens");
        }
        return status::ok();
    });
    if (!hello.is_ok()) {
        SKIPPY_LOG_WARN("stage 0: refused a return link: %s", hello.error().to_string().c_str());
        return;
    }
    const uint32_t lane = hello->hello.lane;
    auto open = read_first_request(p.socket(), options_.link, hello->macs.recv, clock::now() + options_.link.handshake_timeout);
    if (!open.is_ok() || open->kind != message_kind::prediction_return_open || open->session_id != lane) {
        SKIPPY_LOG_WARN("stage 0: return link for lane %u did not open properly%s", lane,
                        open.is_ok() ? "" : (": " + open.error().to_string()).c_str());
        return;
    }
    auto link = std::make_unique<stage_link>(p.take(), options_.link, "stage " + std::to_string(final_stage) + " (return)",
                                             std::move(hello->macs));
    lane_state & ls = *lanes_[lane];
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ls.return_link = std::move(link);
    }
    ls.return_ready.notify_all();
}

void chain_pipeline::close_links(lane_state & ls) {
    ls.broken = true;
    ls.forward.close();
    std::lock_guard<std::mutex> lock(ls.return_mutex);
    ls.return_link.reset();  // the final stage dials a fresh one on ConfigureGeneration
}

status chain_pipeline::fail_lane(int32_t lane, const status & why) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    const status st = lane_failure(ls, why);
    close_links(ls);
    ls.session.cache().reset();
    stage_->truncate_lane(lane, 0);
    SKIPPY_LOG_WARN("stage 0: lane %d failed: %s", lane, st.to_string().c_str());
    return st;
}

// Idle lanes, every 50 ms: heartbeats out, answers and closes in (watch_idle_lane).
void chain_pipeline::liveness_loop() {
    std::unique_lock<std::mutex> lock(liveness_mutex_);
    while (!liveness_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stopping_.load(); })) {
        lock.unlock();
        for (auto & ls : lanes_) watch_idle_lane(*ls);
        lock.lock();
    }
}

void chain_pipeline::watch_idle_lane(lane_state & ls) {
    std::lock_guard<std::mutex> lock(ls.idle_mutex);
    if (ls.in_use || ls.broken || !ls.forward.connected()) return;
    const status st = check_idle_lane(ls, /*may_send=*/true);
    if (!st.is_ok()) drop_idle_lane(ls, st);
}

// An idle lane's links carry nothing until stage 0 sends but the answers to its
// heartbeats: anything else readable on them is the peer closing (a stage restarted or
// died, or a stage below did and the close travelled up) or the Error it sent on its
// way out; a heartbeat unanswered in time is a stage that froze.
status chain_pipeline::check_idle_lane(lane_state & ls, bool may_send) {
    const int forward_fd = ls.forward.fd();
    while (wait_readable(std::span<const int>(&forward_fd, 1), clock::now()) >= 0) SKIPPY_TRY(ls.forward.read_one(0, nullptr));
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        if (ls.return_link) {
            const int fd = ls.return_link->fd();
            if (wait_readable(std::span<const int>(&fd, 1), clock::now()) >= 0) {
                return make_error(error_code::peer_closed, ls.return_link->peer_name() + " closed the idle lane's return link");
            }
        }
    }
    bool sent = false;
    const status st = ls.forward.check_heartbeat(clock::now(), may_send, &sent);
    if (sent) n_lane_heartbeats_sent_.fetch_add(1);
    return st;
}

// The idle lane is dead: re-dialed before its next request. A timeout (its heartbeat,
// or one a stage below reported) is a stuck stage; anything else a closed one.
void chain_pipeline::drop_idle_lane(lane_state & ls, const status & why) {
    if (why.code() == error_code::timed_out) {
        n_lane_heartbeat_failures_.fetch_add(1);
        SKIPPY_LOG_WARN("stage 0: idle lane %d is dead (%s): re-dialing it before its next request", ls.index,
                        why.to_string().c_str());
    } else {
        n_stale_redials_.fetch_add(1);
        SKIPPY_LOG_INFO("stage 0: lane %d: its idle links were closed by the peer (a stage restarted?): re-dialing (%s)",
                        ls.index, why.to_string().c_str());
    }
    close_links(ls);
}

status chain_pipeline::ensure_connected(int32_t lane) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!ls.broken && ls.forward.connected()) {
        // A heartbeat still pending is answered ahead of the request's first reply.
        const status st = check_idle_lane(ls, /*may_send=*/false);
        if (st.is_ok()) return st;
        drop_idle_lane(ls, st);
    }
    close_links(ls);
    SKIPPY_TRY(ls.forward.ensure_connected());
    ls.broken = false;
    return status::ok();
}

protocol::request chain_pipeline::make_request(lane_state & ls, message_kind kind, int64_t pos_start) const {
    protocol::request r;
    r.kind = kind;
    r.request_id = ls.next_request_id++;
    r.session_id = static_cast<uint64_t>(ls.index);
    r.pos_start = pos_start;
    r.state.prompt_token_count = static_cast<uint32_t>(ls.n_prompt);
    r.state.decode_step = static_cast<uint32_t>(ls.decode_step);
    r.state.source_stage = 0;
    switch (kind) {
        case message_kind::prefill:
        case message_kind::prefill_final: r.state.phase = protocol::message_phase::prefill; break;
        case message_kind::decode:
        case message_kind::try_restore_prefill_decode: r.state.phase = protocol::message_phase::decode; break;
        default: r.state.phase = protocol::message_phase::control; break;
    }
    return r;
}

// The return link closed: a stage that failed closed its links and sent its reason
// upstream, hop by hop. Prefer that reason when it arrives shortly. When the forward
// link closes too without a reason, stage 1 itself is gone: a dead stage sends
// nothing, and the final stage only saw its own upstream close, so blaming the return
// link would name the wrong stage. Only a forward link that stays open (stage 1
// alive, no reason within 2 s) leaves the return link's failure as the answer.
status chain_pipeline::upstream_reason(lane_state & ls, const status & fallback) {
    const auto deadline = clock::now() + std::chrono::seconds(2);
    while (ls.forward.connected()) {
        auto r = ls.forward.link().read_reply(deadline);
        if (!r.is_ok()) {
            if (r.error().code() == error_code::timed_out) return fallback;
            return r.error();  // the nearest failed stage: stage 1
        }
        if (r->kind == message_kind::error) return protocol::error_reply_status(*r);
    }
    return fallback;
}

status chain_pipeline::roundtrip(lane_state & ls, protocol::request req, protocol::reply & reply, const std::function<void()> & meanwhile) {
    // Every step holding this lane must have reached stage 1 first (batch_link.h).
    if (batch_) batch_->wait_idle(ls.index);
    uint32_t forward_us = 0;
    SKIPPY_TRY(ls.forward.roundtrip(req, reply, &forward_us, meanwhile));
    ls.stats.max_forward_us = std::max(ls.stats.max_forward_us, forward_us);
    ls.stats = protocol::merge_stats(ls.stats, reply.stats);
    return status::ok();
}

// Connects the lane if needed and configures it on every stage; the final stage opens
// the lane's return link before it acks.
status chain_pipeline::configure_lane(lane_state & ls, const sampling_config & sampling, std::string_view cache_key) {
    SKIPPY_TRY(ensure_connected(ls.index));
    protocol::request req = make_request(ls, message_kind::configure_generation, 0);
    protocol::generation_config gc;
    gc.sampling = to_sampling_params(sampling);
    gc.cache_key = std::string(cache_key);
    gc.cache_mode = to_prompt_cache_mode(options_.cache.config.mode);
    gc.cache_min_tokens = static_cast<uint32_t>(std::max<int64_t>(0, options_.cache.config.min_tokens));
    req.generation = gc;
    protocol::reply reply;
    SKIPPY_TRY(roundtrip(ls, std::move(req), reply));
    // The acceptor may still be registering the return link.
    std::unique_lock<std::mutex> lock(ls.return_mutex);
    if (!ls.return_ready.wait_for(lock, options_.link.handshake_timeout, [&] { return ls.return_link != nullptr; })) {
        return make_error(error_code::unavailable, "the final stage did not open its return link to stage 0");
    }
    return status::ok();
}

status chain_pipeline::begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                             std::string_view cache_key) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    SKIPPY_TRY(sampling.validate(n_vocab()));
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    {
        std::lock_guard<std::mutex> lock(ls.idle_mutex);
        ls.in_use = true;  // the liveness thread leaves it alone from here to end()
    }
    stage_->truncate_lane(lane, 0);
    ls.n_prompt = static_cast<int64_t>(prompt_tokens.size());
    ls.decode_step = 0;
    ls.stats = {};
    ls.restore.reset();
    {
        std::lock_guard<std::mutex> lock(ls.failure_mutex);
        ls.batch_failure.reset();
    }
    const cache::cache_mode mode = options_.cache.config.mode;
    ls.session.cache().configure(std::string(cache_key), mode, ls.n_prompt);

    if (single_stage()) {
        SKIPPY_TRY(ls.session.start_sampling(sampling));
        return ls.restore.begin(prompt_tokens);
    }

    status st = configure_lane(ls, sampling, cache_key);
    if (ls.retrying) {
        // The request failed before its first token (retry_before_first_token): a stage
        // restarting refuses or closes fresh connections for a moment. Keep dialing.
        ls.retrying = false;
        const auto give_up = clock::now() + options_.retry_wait;
        while (!st.is_ok() && lost_connection(st) && clock::now() < give_up && !stopping_.load()) {
            close_links(ls);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            ls.session.cache().configure(std::string(cache_key), mode, ls.n_prompt);
            st = configure_lane(ls, sampling, cache_key);
        }
    }
    if (!st.is_ok()) return fail_lane(lane, st);
    st = ls.restore.begin(prompt_tokens);
    return st.is_ok() ? st : fail_lane(lane, st);
}

bool chain_pipeline::retry_before_first_token(int32_t lane, const status & failure) {
    if (single_stage() || lane < 0 || lane >= n_lanes() || !lost_connection(failure) || stopping_.load()) return false;
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    SKIPPY_LOG_INFO("stage 0: lane %d: the request failed before its first token (%s): running it again on a fresh lane", lane,
                    failure.to_string().c_str());
    n_retries_.fetch_add(1);
    if (!ls.broken) close_links(ls);
    ls.retrying = true;
    return true;
}

status chain_pipeline::prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool decodes) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!single_stage() && ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    if (!decodes) {
        const status st = ls.restore.settle();
        if (!st.is_ok()) return fail_lane(lane, st);
    }
    // The rest of the prompt goes to the scheduler at once: it cuts the chunks,
    // smaller while other lanes decode.
    const int64_t n_prefill = static_cast<int64_t>(prompt.size()) - 1;
    const int64_t from = std::clamp<int64_t>(ls.restore.restored(), 0, std::max<int64_t>(n_prefill, 0));
    if (from >= n_prefill) return status::ok();
    return prefill_range(lane, from, prompt.subspan(static_cast<size_t>(from), static_cast<size_t>(n_prefill - from)), chunk_tokens);
}

status chain_pipeline::prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    return prefill_range(lane, pos_start, tokens, static_cast<int32_t>(std::max<size_t>(tokens.size(), 1)));
}

status chain_pipeline::prefill_range(int32_t lane, int64_t pos_start, std::span<const token_id> tokens, int32_t chunk_tokens) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!single_stage() && ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    const status st = scheduler_->prefill(lane, pos_start, tokens, chunk_tokens);
    if (st.is_ok() || single_stage()) return st;
    return fail_lane(lane, st);
}

result<token_id> chain_pipeline::decode(int32_t lane, int64_t pos, token_id token) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (single_stage()) {
        if (!ls.session.sampling()) return make_error(error_code::internal, "decode before begin");
        SKIPPY_ASSIGN_OR_RETURN(token_id next, scheduler_->decode(lane, pos, token, &ls.logprobs));
        ++ls.decode_step;
        return next;
    }
    if (ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    if (ls.restore.deferred()) return decode_with_restore(lane, pos, token);
    auto sent = scheduler_->decode(lane, pos, token);
    if (!sent.is_ok()) return fail_lane(lane, sent.error());
    return wait_for_token(lane, ls.decode_request_id);
}

// The first decode of a prompt whose first n - 1 tokens every stage holds: restore
// them and decode the last prompt token in one trip. A miss anywhere (an entry evicted
// since the probe) rolls the chain back and computes the prompt instead.
result<token_id> chain_pipeline::decode_with_restore(int32_t lane, int64_t pos, token_id token) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    auto next = ls.restore.decode(pos, token, [&] { return ls.session.compute(pos, std::span<const token_id>(&token, 1), {}); },
                                  &ls.logprobs);
    if (!next.is_ok()) return fail_lane(lane, next.error());
    if (next->has_value()) {
        const int32_t t = **next;
        if (t < 0 || t >= n_vocab() || !logprobs_in_vocab(ls.logprobs)) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned a token outside the vocabulary"));
        }
        ++ls.decode_step;
        return static_cast<token_id>(t);
    }
    // Fall back: compute the whole prompt from position 0 on every stage.
    stage_->truncate_lane(lane, 0);
    const auto & prompt = ls.restore.prompt();
    SKIPPY_TRY(prefill_range(lane, 0, std::span<const token_id>(prompt).first(static_cast<size_t>(pos)), k_fallback_chunk_tokens));
    return decode(lane, pos, token);
}

bool chain_pipeline::logprobs_in_vocab(const token_logprobs & lp) const {
    return std::all_of(lp.top.begin(), lp.top.end(), [&](const token_logprob & e) { return e.id >= 0 && e.id < n_vocab(); });
}

const token_logprobs & chain_pipeline::last_logprobs(int32_t lane) const {
    if (lane < 0 || lane >= n_lanes()) return pipeline_i::last_logprobs(lane);
    return lanes_[static_cast<size_t>(lane)]->logprobs;
}

result<token_id> chain_pipeline::wait_for_token(int32_t lane, uint64_t request_id) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    stage_link * ret = nullptr;
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ret = ls.return_link.get();
    }
    if (!ret) return fail_lane(lane, make_error(error_code::unavailable, "no return link from the final stage"));
    // Wait for the token on the return link while taking acks (and errors) from stage 1.
    // A stuck stage usually fails the batch link first (its acks are due sooner, per
    // hop); this is the bound for the whole trip.
    const auto deadline = ls.token_deadline;
    while (true) {
        const int fds[2] = {ret->fd(), ls.forward.fd()};
        const int ready = wait_readable(fds, deadline);
        if (ready < 0) {
            // A stuck stage usually fails the batch link first (its acks are due sooner)
            // and that reason, naming the stage, wins in fail_lane; without one the token
            // is missing from the final stage: name it.
            const int32_t last = topo_.n_stages() - 1;
            return fail_lane(lane, make_error(error_code::timed_out, "stage " + std::to_string(last) + " (" +
                                                                         topo_.stages[static_cast<size_t>(last)].address.to_string() +
                                                                         ", return) did not send the predicted token within its "
                                                                         "deadline: the stage is stuck or unreachable"));
        }
        if (ready == 1) {
            // Nothing but an Error travels up a lane's forward link while it decodes.
            status st = ls.forward.read_one(0, nullptr);
            if (!st.is_ok()) return fail_lane(lane, st);
            continue;
        }
        auto r = ret->read_reply(ret->frame_deadline());
        if (!r.is_ok()) return fail_lane(lane, upstream_reason(ls, r.error()));
        if (r->kind == message_kind::error) return fail_lane(lane, protocol::error_reply_status(*r));
        if (r->kind != message_kind::predicted_token || r->request_id != request_id) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned an unexpected " +
                                                                            std::string(protocol::message_kind_name(r->kind))));
        }
        if (r->token < 0 || r->token >= n_vocab()) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned token " + std::to_string(r->token) +
                                                                            ", outside the vocabulary"));
        }
        ls.logprobs = get_logprobs(*r);
        if (!logprobs_in_vocab(ls.logprobs)) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned a logprob for a token outside the vocabulary"));
        }
        ls.stats = protocol::merge_stats(ls.stats, r->stats);
        ++ls.decode_step;
        return static_cast<token_id>(r->token);
    }
}

void chain_pipeline::end(int32_t lane) {
    if (lane < 0 || lane >= n_lanes()) return;
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    scheduler_->end(lane);
    protocol::request stop = make_request(ls, message_kind::stop, 0);
    add_cache_counters(ls.stats, ls.session.cache().stop({stop.request_id, stop.kind}));
    stage_->truncate_lane(lane, 0);
    ls.session.stop_sampling();
    if (!single_stage() && !ls.broken) {
        protocol::reply reply;
        status st = roundtrip(ls, std::move(stop), reply);
        if (!st.is_ok()) (void)fail_lane(lane, st);
    }
    std::lock_guard<std::mutex> lock(ls.idle_mutex);
    ls.in_use = false;
}

void chain_pipeline::wait_for_records() {
    if (cache_ && cache_->cache()) cache_->cache()->wait_for_records();
    for (const auto & s : servers_) {
        if (s->cache_host() && s->cache_host()->cache()) s->cache_host()->cache()->wait_for_records();
    }
}

int64_t chain_pipeline::cached_tokens(int32_t lane) const { return lanes_[static_cast<size_t>(lane)]->restore.restored(); }

pipeline_i::cache_stage_masks chain_pipeline::cache_masks(int32_t lane) const {
    const protocol::stats_block & s = lanes_[static_cast<size_t>(lane)]->stats;
    return {s.kv_hit_stage_mask, s.kv_record_stage_mask};
}

protocol::stats_block chain_pipeline::last_stats(int32_t lane) const { return lanes_[static_cast<size_t>(lane)]->stats; }

std::vector<telemetry::stage_snapshot> chain_pipeline::stage_snapshots() {
    std::vector<telemetry::stage_snapshot> out;
    out.push_back(stage_snapshot_of(0, *stage_, cache_.get(), &steps_));
    for (const auto & s : servers_) out.push_back(s->snapshot());
    return out;
}

stage_options stage_options_for(const stage_options & base, layer_range layers, const cache_settings & cache) {
    stage_options so = base;
    so.layers = layers;
    const int32_t ctx = base.ctx_size > 0 ? base.ctx_size : 4096;
    so.kv_extra_blocks = base.kv_extra_blocks + cache.extra_blocks(ctx, base.n_lanes, base.kv_block_tokens);
    return so;
}

namespace {

struct loaded_stage {
    std::unique_ptr<stage>            st;
    std::unique_ptr<stage_cache_host> cache;
};

result<loaded_stage> load_stage(std::shared_ptr<const gguf::file> file, int32_t index, layer_range layers,
                                const stage_options & options, const chain_options & chain) {
    loaded_stage out;
    SKIPPY_ASSIGN_OR_RETURN(out.st, stage::load(file, stage_options_for(options, layers, chain.cache)));
    SKIPPY_ASSIGN_OR_RETURN(out.cache, stage_cache_host::create(*out.st, *file, index, chain.cache));
    return out;
}

}  // namespace

result<std::unique_ptr<chain_pipeline>> make_embedded_chain(std::shared_ptr<const gguf::file> file, int32_t n_stages,
                                                            const stage_options & options, const chain_options & chain) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    SKIPPY_ASSIGN_OR_RETURN(topology topo, even_split(file->path(), hp.n_layer, n_stages, "127.0.0.1", 1));
    std::vector<layer_range> layers;
    for (const auto & s : topo.stages) layers.push_back(s.layers);
    return make_embedded_chain(std::move(file), layers, options, chain);
}

result<std::unique_ptr<chain_pipeline>> make_embedded_chain(std::shared_ptr<const gguf::file> file, std::span<const layer_range> layers,
                                                            const stage_options & options, const chain_options & chain) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    const int32_t n_stages = static_cast<int32_t>(layers.size());
    SKIPPY_ASSIGN_OR_RETURN(topology topo, even_split(file->path(), hp.n_layer, n_stages, "127.0.0.1", 1));
    for (int32_t i = 0; i < n_stages; ++i) topo.stages[static_cast<size_t>(i)].layers = layers[static_cast<size_t>(i)];
    if (status st = topo.validate(hp.n_layer); !st.is_ok()) return make_error(error_code::invalid_argument, st.message());
    // Bind every stage on an ephemeral loopback port first, then tell each the others'.
    std::vector<tcp_listener> listeners;
    if (n_stages > 1) {
        for (auto & s : topo.stages) {
            s.address.port = 0;  // the kernel picks a free port
            SKIPPY_ASSIGN_OR_RETURN(tcp_listener l, tcp_listener::listen(s.address));
            s.address.port = l.port();
            listeners.push_back(std::move(l));
        }
    } else {
        listeners.emplace_back();
    }
    stage_options shared = options;
    if (!shared.shared_pool) shared.shared_pool = std::make_shared<kernels::thread_pool>(options.n_threads > 0 ? options.n_threads : physical_core_count());
    std::vector<std::unique_ptr<stage_server>> servers;
    for (int32_t i = 1; i < n_stages; ++i) {
        SKIPPY_ASSIGN_OR_RETURN(loaded_stage ls, load_stage(file, i, topo.stages[static_cast<size_t>(i)].layers, shared, chain));
        servers.push_back(std::make_unique<stage_server>(std::move(ls.st), std::move(ls.cache), i, topo,
                                                         std::move(listeners[static_cast<size_t>(i)]), chain));
        servers.back()->start();
    }
    SKIPPY_ASSIGN_OR_RETURN(loaded_stage s0, load_stage(file, 0, topo.stages[0].layers, shared, chain));
    auto pipeline = std::make_unique<chain_pipeline>(std::move(s0.st), std::move(s0.cache), topo, std::move(listeners[0]), chain);
    pipeline->own_servers(std::move(servers));
    return pipeline;
}

result<std::unique_ptr<chain_pipeline>> make_topology_chain(std::shared_ptr<const gguf::file> file, const topology & topo,
                                                            const stage_options & options, const chain_options & chain) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    SKIPPY_TRY(topo.validate(hp.n_layer));
    SKIPPY_ASSIGN_OR_RETURN(loaded_stage s0, load_stage(file, 0, topo.stages[0].layers, options, chain));
    tcp_listener l;
    if (topo.n_stages() > 1) {
        SKIPPY_ASSIGN_OR_RETURN(l, tcp_listener::listen(topo.stages[0].address));
    }
    // The stages run in processes of their own: with a step in flight per stage, none
    // waits for the others.
    chain_options co = chain;
    if (co.schedule.micro_batches == 0) co.schedule.micro_batches = topo.n_stages();
    return std::make_unique<chain_pipeline>(std::move(s0.st), std::move(s0.cache), topo, std::move(l), co);
}

}  // namespace skippy::transport
