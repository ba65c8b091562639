#include "transport/stage_server.h"

#include "base/log.h"
#include "runtime/sampler.h"
#include "transport/convert.h"
#include "transport/lane_cache.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace skippy::transport {

using protocol::message_kind;

namespace {

uint32_t micros_since(clock::time_point t0) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count();
    return us > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(us);
}

// A measured interval for the stats block: rounded up, and at least 1 µs, so that 0
// always means "not measured" (docs/protocol.md, Stats block).
uint32_t measured_us_since(clock::time_point t0) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
    const int64_t us = ns <= 0 ? 1 : (ns + 999) / 1000;
    return us > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(us);
}

bool is_streamed(message_kind k) {
    return k == message_kind::prefill || k == message_kind::prefill_final || k == message_kind::decode;
}

}  // namespace

// Everything one lane owns on this stage, for the life of its upstream connection.
class stage_server::lane_worker {
public:
    lane_worker(stage_server & server, int32_t lane, stage_link upstream)
        : server_(server), stage_(*server.stage_), lane_(lane), upstream_(std::move(upstream)),
          is_final_(stage_.is_last()), n_embd_(stage_.hparams().n_embd),
          me_("stage " + std::to_string(server.stage_index_)), cache_(server.cache_.get(), lane) {}

    void run();

private:
    status handle(protocol::request & req);
    status handle_streamed(protocol::request & req);
    status handle_configure(const protocol::request & req, protocol::reply & ack);
    status handle_probe(const protocol::request & req, protocol::reply & ack);
    status handle_try_restore(const protocol::request & req, protocol::reply & ack);
    status handle_try_restore_decode(protocol::request & req, protocol::reply & out);

    status check_activation(const protocol::request & req, int64_t rows) const;
    status compute(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in);
    status sample_and_return(const protocol::request & req, protocol::stats_block stats);
    result<token_id> sample_last_row();
    void track_tokens(int64_t pos_start, std::span<const token_id> tokens);
    status forward_streamed(protocol::request req, const protocol::stats_block & stats);
    status forward_sync(protocol::request fwd, protocol::reply & reply);
    status connect_downstream();
    status read_downstream(uint64_t want_id, protocol::reply * out);
    uint32_t take_pending_forward_us() { return std::exchange(pending_forward_us_, 0); }

    stage_server &           server_;
    stage &                  stage_;
    const int32_t            lane_;
    stage_link               upstream_;
    stage_link               downstream_;  // next stage, or stage 0's return link on the final stage
    const bool               is_final_;
    const int32_t            n_embd_;
    const std::string        me_;
    lane_cache               cache_;
    int32_t                  outstanding_ = 0;  // streamed requests downstream has not acked
    std::unique_ptr<sampler> sampler_;
    std::vector<token_id>    sequence_;       // final stage: the tokens at positions [0, n), for penalties
    protocol::stats_block    pending_stats_;  // final stage: prefill stats not yet returned to stage 0
    std::vector<float>       hidden_, logits_;
    uint64_t                 current_request_ = 0;
    clock::time_point        received_at_;             // when current_request_'s frame was read
    uint32_t                 pending_forward_us_ = 0;  // forward time not yet reported (sent with the next message)
};

void stage_server::lane_worker::run() {
    lane_slot & slot = *server_.lanes_[static_cast<size_t>(lane_)];
    {
        std::lock_guard<std::mutex> lock(slot.mutex);
        slot.upstream = &upstream_;
        slot.downstream = &downstream_;
    }
    stage_.truncate_lane(lane_, 0);
    SKIPPY_LOG_DEBUG("%s: lane %d connected", me_.c_str(), lane_);

    status failure;
    while (!server_.stopping_.load()) {
        const int fds[2] = {upstream_.fd(), downstream_.connected() ? downstream_.fd() : -1};
        const int ready = wait_readable(std::span<const int>(fds, downstream_.connected() ? 2 : 1), clock::now() + std::chrono::seconds(1));
        if (ready < 0) continue;
        if (ready == 1) {
            if (is_final_) {
                // Stage 0 never writes on the return link: readable means it closed it.
                std::lock_guard<std::mutex> lock(slot.mutex);
                downstream_.close();
                continue;
            }
            failure = read_downstream(0, nullptr);
            if (!failure.is_ok()) break;
            continue;
        }
        auto req = upstream_.read_request(upstream_.reply_deadline());
        if (!req.is_ok()) {
            // A close between frames ends the lane quietly; anything else (a truncated
            // or malformed frame) is a failure, logged and answered below.
            if (!upstream_.peer_closed()) failure = req.error();
            break;
        }
        received_at_ = clock::now();
        current_request_ = req->request_id;
        failure = handle(*req);
        if (!failure.is_ok()) break;
    }
    {
        std::lock_guard<std::mutex> lock(slot.mutex);
        if (!failure.is_ok() && !server_.stopping_.load()) {
            SKIPPY_LOG_WARN("%s: lane %d closed: %s", me_.c_str(), lane_, failure.to_string().c_str());
            upstream_.fail(current_request_, failure.with_context(me_));
            // Stage 0 may be waiting on the return link: tell it the reason there too.
            if (is_final_) downstream_.fail(current_request_, failure.with_context(me_));
        }
        slot.upstream = nullptr;
        slot.downstream = nullptr;
        upstream_.close();
        downstream_.close();
    }
    cache_.reset();
    stage_.truncate_lane(lane_, 0);
}

status stage_server::lane_worker::handle(protocol::request & req) {
    if (is_streamed(req.kind)) return handle_streamed(req);
    protocol::reply ack;
    ack.kind = message_kind::ack;
    ack.request_id = req.request_id;
    switch (req.kind) {
        case message_kind::configure_generation:
            SKIPPY_TRY(handle_configure(req, ack));
            break;
        case message_kind::stop:
        case message_kind::trim_session: {
            protocol::reply down;
            if (!is_final_) {
                SKIPPY_TRY(forward_sync(req, down));
                ack.stats = down.stats;
            }
            if (req.kind == message_kind::stop) {
                // A request that ended without a token (max_tokens 0) never collected
                // the prefill stats the final stage holds for its reply: they go here.
                if (is_final_) ack.stats = protocol::merge_stats(ack.stats, pending_stats_);
                pending_stats_ = {};
                add_cache_counters(ack.stats, cache_.stop());
                stage_.truncate_lane(lane_, 0);
                sampler_.reset();
                sequence_.clear();
            } else {
                if (req.pos_start == 0) cache_.rollback();
                stage_.truncate_lane(lane_, req.pos_start);
                if (static_cast<int64_t>(sequence_.size()) > req.pos_start) sequence_.resize(static_cast<size_t>(req.pos_start));
            }
            break;
        }
        case message_kind::probe_prefill:
            SKIPPY_TRY(handle_probe(req, ack));
            break;
        case message_kind::restore_prefill:
        case message_kind::try_restore_prefill:
            SKIPPY_TRY(handle_try_restore(req, ack));
            break;
        case message_kind::try_restore_prefill_decode:
            SKIPPY_TRY(handle_try_restore_decode(req, ack));
            break;
        default:
            return make_error(error_code::unsupported,
                              me_ + " does not handle " + std::string(protocol::message_kind_name(req.kind)) + " requests");
    }
    ack.stats.max_forward_us = std::max(ack.stats.max_forward_us, take_pending_forward_us());
    return upstream_.send_reply(ack);
}

status stage_server::lane_worker::check_activation(const protocol::request & req, int64_t rows) const {
    if (!req.activation) return make_error(error_code::invalid_data, std::string(protocol::message_kind_name(req.kind)) + " without an activation frame");
    const auto & act = *req.activation;
    if (static_cast<int32_t>(act.n_embd) != n_embd_) {
        return make_error(error_code::invalid_data, "activation width " + std::to_string(act.n_embd) + " but the model's is " + std::to_string(n_embd_));
    }
    if (static_cast<int32_t>(act.layer_end) != stage_.slice().range().start) {
        return make_error(error_code::invalid_data, "activation covers layers up to " + std::to_string(act.layer_end) +
                                                        " but this stage starts at " + std::to_string(stage_.slice().range().start));
    }
    if (act.values.size() != static_cast<size_t>(rows * n_embd_)) return make_error(error_code::invalid_data, "activation row count mismatch");
    return status::ok();
}

status stage_server::lane_worker::compute(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    hidden_.resize(static_cast<size_t>(n * n_embd_));
    return stage_.forward(lane_, pos_start, tokens, act_in, n, hidden_);
}

void stage_server::lane_worker::track_tokens(int64_t pos_start, std::span<const token_id> tokens) {
    if (!is_final_) return;
    sequence_.resize(static_cast<size_t>(std::min<int64_t>(pos_start, static_cast<int64_t>(sequence_.size()))));
    sequence_.insert(sequence_.end(), tokens.begin(), tokens.end());
}

result<token_id> stage_server::lane_worker::sample_last_row() {
    const int64_t rows = static_cast<int64_t>(hidden_.size()) / n_embd_;
    logits_.resize(static_cast<size_t>(stage_.hparams().n_vocab));
    stage_.logits(std::span<const float>(hidden_).subspan(static_cast<size_t>((rows - 1) * n_embd_)), 1, logits_);
    sampler_->set_history(sequence_);
    return sampler_->sample_finite(logits_);
}

status stage_server::lane_worker::sample_and_return(const protocol::request & req, protocol::stats_block stats) {
    protocol::reply tok;
    tok.kind = message_kind::predicted_token;
    tok.request_id = req.request_id;
    SKIPPY_ASSIGN_OR_RETURN(tok.token, sample_last_row());
    tok.decode_step = req.state.decode_step;
    tok.stats = protocol::merge_stats(pending_stats_, stats);
    tok.stats.max_forward_us = std::max(tok.stats.max_forward_us, take_pending_forward_us());
    pending_stats_ = {};
    const auto t0 = clock::now();
    SKIPPY_TRY(connect_downstream());
    SKIPPY_TRY(downstream_.send_reply(tok));
    pending_forward_us_ = measured_us_since(t0);  // reported with the next token or reply
    return status::ok();
}

status stage_server::lane_worker::handle_streamed(protocol::request & req) {
    const auto t0 = clock::now();
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    SKIPPY_TRY(check_activation(req, n));
    if (is_final_ && !sampler_) return make_error(error_code::invalid_data, "prefill/decode before ConfigureGeneration");
    const bool prefill = req.kind != message_kind::decode;
    cache::cache_counters counters;

    // In-band lookup at position 0 (DESIGN §6): a non-final stage skips the chunk when
    // its forwarded frame and KV are both cached; the final stage restores what it can
    // and computes only the rest (it forwards nothing).
    bool from_cache = false;  // the whole chunk: KV restored and the output frame cached
    int64_t restored = 0;
    if (prefill && req.pos_start == 0 && cache_.lookups()) {
        if (!is_final_) {
            from_cache = cache_.restore_chunk_with_activation(req.tokens, n_embd_, hidden_, counters);
            restored = from_cache ? n : 0;
        } else {
            const int64_t max = req.kind == message_kind::prefill_final ? n - 1 : n;
            const auto r = cache_.restore(req.tokens, max, cache::lookup_kind::in_band, true);
            counters.merge(r.counters);
            restored = r.restored_tokens;
        }
    }
    protocol::stats_block local;
    if (!from_cache && restored < n) {
        local.max_queue_us = measured_us_since(received_at_);
        const auto rows = std::span<const float>(req.activation->values).subspan(static_cast<size_t>(restored * n_embd_));
        SKIPPY_TRY(compute(req.pos_start + restored, std::span<const token_id>(req.tokens).subspan(static_cast<size_t>(restored)), rows));
        if (prefill) {
            cache_.note_prefill(req.pos_start + restored, std::span<const token_id>(req.tokens).subspan(static_cast<size_t>(restored)));
            if (!is_final_ && req.pos_start == 0) cache_.record_activation(req.tokens, n_embd_, hidden_);
        }
    }
    track_tokens(req.pos_start, req.tokens);
    if (prefill) counters.merge(cache_.record_if_final(req.pos_start + n, req.kind == message_kind::prefill_final));

    local.max_compute_us = micros_since(t0);
    add_cache_counters(local, counters);
    const protocol::stats_block merged = protocol::merge_stats(req.stats, local);
    if (is_final_) {
        if (req.kind == message_kind::prefill) {
            pending_stats_ = protocol::merge_stats(pending_stats_, merged);
        } else {
            SKIPPY_TRY(sample_and_return(req, merged));
        }
    } else {
        SKIPPY_TRY(forward_streamed(std::move(req), merged));
    }
    protocol::reply ack;
    ack.kind = message_kind::ack;
    ack.request_id = current_request_;
    ack.stats = local;
    return upstream_.send_reply(ack);
}

status stage_server::lane_worker::forward_streamed(protocol::request fwd, const protocol::stats_block & stats) {
    const auto t0 = clock::now();
    SKIPPY_TRY(connect_downstream());
    while (outstanding_ >= server_.options_.credit_window) SKIPPY_TRY(read_downstream(0, nullptr));
    fwd.state.source_stage = static_cast<uint32_t>(server_.stage_index_);
    fwd.stats = stats;
    // This frame's own forward time is only known once it is sent: it rides with the next one.
    fwd.stats.max_forward_us = std::max(fwd.stats.max_forward_us, take_pending_forward_us());
    auto & frame = *fwd.activation;
    frame.producer_stage = static_cast<uint32_t>(server_.stage_index_);
    frame.layer_start = static_cast<uint32_t>(stage_.slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_.slice().range().end);
    frame.dtype = protocol::activation_dtype::f32;
    frame.values.assign(hidden_.begin(), hidden_.end());
    SKIPPY_TRY(downstream_.send_request(fwd));
    pending_forward_us_ = measured_us_since(t0);
    ++outstanding_;
    return status::ok();
}

status stage_server::lane_worker::handle_configure(const protocol::request & req, protocol::reply & ack) {
    if (!req.generation) return make_error(error_code::invalid_data, "ConfigureGeneration without a config");
    stage_.truncate_lane(lane_, 0);
    cache_.configure(req.generation->cache_key, to_cache_mode(req.generation->cache_mode), req.state.prompt_token_count);
    pending_stats_ = {};
    if (is_final_) {
        sampling_config sc = to_sampling_config(req.generation->sampling);
        SKIPPY_TRY(sc.validate(stage_.hparams().n_vocab));
        sampler_ = std::make_unique<sampler>(std::move(sc));
        sequence_.clear();
        return connect_downstream();  // the return link, before stage 0 hears the ack
    }
    protocol::reply down;
    SKIPPY_TRY(forward_sync(req, down));
    ack.stats = down.stats;
    return status::ok();
}

status stage_server::lane_worker::handle_probe(const protocol::request & req, protocol::reply & ack) {
    int64_t restorable = cache_.probe(req.tokens);
    if (!is_final_ && restorable > 0) {
        protocol::request fwd = req;
        fwd.tokens.resize(static_cast<size_t>(restorable));
        protocol::reply down;
        SKIPPY_TRY(forward_sync(std::move(fwd), down));
        restorable = std::min(restorable, down.restored_tokens);
        ack.stats = down.stats;
    }
    if (restorable < cache_.min_tokens()) restorable = 0;
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    ack.restored_tokens = restorable;
    ack.outcome = restorable == n ? protocol::ack_outcome::hit : restorable > 0 ? protocol::ack_outcome::short_hit : protocol::ack_outcome::miss;
    return status::ok();
}

// TryRestorePrefill: all of `tokens` or nothing, here and below; a miss below rolls
// this stage back. RestorePrefill: the same, without the rollback.
status stage_server::lane_worker::handle_try_restore(const protocol::request & req, protocol::reply & ack) {
    const bool try_kind = req.kind == message_kind::try_restore_prefill;
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const auto r = cache_.restore(req.tokens, n, try_kind ? cache::lookup_kind::try_restore : cache::lookup_kind::restore, false);
    add_cache_counters(ack.stats, r.counters);
    const bool hit = r.outcome == cache::lookup_outcome::hit && r.restored_tokens == n;
    if (hit) track_tokens(0, req.tokens);
    ack.outcome = hit ? protocol::ack_outcome::hit : to_ack_outcome(r.outcome);
    ack.restored_tokens = hit ? n : 0;
    if (is_final_ || (!hit && try_kind)) return status::ok();
    protocol::reply down;
    SKIPPY_TRY(forward_sync(req, down));
    ack.stats = protocol::merge_stats(ack.stats, down.stats);
    if (down.outcome != protocol::ack_outcome::hit) {
        if (hit && try_kind) cache_.rollback();
        ack.outcome = down.outcome == protocol::ack_outcome::hit ? protocol::ack_outcome::miss : down.outcome;
        ack.restored_tokens = 0;
    }
    return status::ok();
}

// TryRestorePrefillDecode: restore the prefix (all or nothing), then decode the current
// token from the attached one-row activation; the final stage answers with the next
// token in the reply. A miss anywhere rolls back every stage above it.
status stage_server::lane_worker::handle_try_restore_decode(protocol::request & req, protocol::reply & out) {
    const auto t0 = clock::now();
    SKIPPY_TRY(check_activation(req, 1));
    if (is_final_ && !sampler_) return make_error(error_code::invalid_data, "TryRestorePrefillDecode before ConfigureGeneration");
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const auto r = cache_.restore(req.tokens, n, cache::lookup_kind::try_restore_decode, false);
    add_cache_counters(out.stats, r.counters);
    if (r.outcome != cache::lookup_outcome::hit || r.restored_tokens != n) {
        out.outcome = to_ack_outcome(r.outcome == cache::lookup_outcome::hit ? cache::lookup_outcome::short_ : r.outcome);
        if (r.restored_tokens > 0) cache_.rollback();
        return status::ok();
    }
    const token_id current = req.state.current_token;
    out.stats.max_queue_us = measured_us_since(received_at_);
    SKIPPY_TRY(compute(req.pos_start + n, std::span<const token_id>(&current, 1), req.activation->values));
    out.stats.max_compute_us = micros_since(t0);
    if (is_final_) {
        track_tokens(0, req.tokens);
        track_tokens(n, std::span<const token_id>(&current, 1));
        out.kind = message_kind::predicted_token;
        SKIPPY_ASSIGN_OR_RETURN(out.token, sample_last_row());
        out.decode_step = req.state.decode_step;
        out.restored_tokens = n;
        return status::ok();
    }
    protocol::request fwd = std::move(req);
    auto & frame = *fwd.activation;
    frame.producer_stage = static_cast<uint32_t>(server_.stage_index_);
    frame.layer_start = static_cast<uint32_t>(stage_.slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_.slice().range().end);
    frame.values.assign(hidden_.begin(), hidden_.end());
    fwd.stats = protocol::merge_stats(fwd.stats, out.stats);
    protocol::reply down;
    SKIPPY_TRY(forward_sync(std::move(fwd), down));
    if (down.kind == message_kind::predicted_token) {
        down.stats = protocol::merge_stats(down.stats, out.stats);
        out = std::move(down);
        return status::ok();
    }
    cache_.rollback();
    out.stats = protocol::merge_stats(out.stats, down.stats);
    out.outcome = down.outcome == protocol::ack_outcome::hit ? protocol::ack_outcome::miss : down.outcome;
    return status::ok();
}

status stage_server::lane_worker::connect_downstream() {
    if (downstream_.connected()) return status::ok();
    lane_slot & slot = *server_.lanes_[static_cast<size_t>(lane_)];
    protocol::hello h;
    h.lane = static_cast<uint32_t>(lane_);
    h.sender_stage = static_cast<uint32_t>(server_.stage_index_);
    const auto & topo = server_.topo_;
    if (is_final_) {
        h.link = protocol::link_kind::direct_return;
        const auto & ep = topo.stages[0].address;
        SKIPPY_ASSIGN_OR_RETURN(stage_link l, connect_link(ep, h, server_.options_.link, "stage 0 (" + ep.to_string() + ")"));
        protocol::request open;
        open.kind = message_kind::prediction_return_open;
        open.session_id = static_cast<uint64_t>(lane_);
        open.state.phase = protocol::message_phase::control;
        open.state.source_stage = static_cast<uint32_t>(server_.stage_index_);
        SKIPPY_TRY(l.send_request(open));
        std::lock_guard<std::mutex> lock(slot.mutex);
        downstream_ = std::move(l);
    } else {
        h.link = protocol::link_kind::forward;
        const int32_t next = server_.stage_index_ + 1;
        const auto & ep = topo.stages[static_cast<size_t>(next)].address;
        SKIPPY_ASSIGN_OR_RETURN(stage_link l, connect_link(ep, h, server_.options_.link,
                                                           "stage " + std::to_string(next) + " (" + ep.to_string() + ")"));
        std::lock_guard<std::mutex> lock(slot.mutex);
        downstream_ = std::move(l);
    }
    outstanding_ = 0;
    return status::ok();
}

// One reply from downstream: acks of streamed requests return credit; the reply to
// `want_id` goes to *out; an Error becomes this lane's failure.
status stage_server::lane_worker::read_downstream(uint64_t want_id, protocol::reply * out) {
    SKIPPY_ASSIGN_OR_RETURN(protocol::reply r, downstream_.read_reply(downstream_.reply_deadline()));
    if (r.kind == message_kind::error) return protocol::error_reply_status(r);
    if (out && r.request_id == want_id) {
        *out = std::move(r);
        return status::ok();
    }
    if (r.kind != message_kind::ack) {
        return make_error(error_code::invalid_data, downstream_.peer_name() + " sent an unexpected " +
                                                        std::string(protocol::message_kind_name(r.kind)));
    }
    if (outstanding_ <= 0) return make_error(error_code::invalid_data, downstream_.peer_name() + " acked more than was sent");
    --outstanding_;
    return status::ok();
}

// A control request goes downstream once every streamed request before it is acked.
status stage_server::lane_worker::forward_sync(protocol::request fwd, protocol::reply & reply) {
    const auto t0 = clock::now();
    SKIPPY_TRY(connect_downstream());
    while (outstanding_ > 0) SKIPPY_TRY(read_downstream(0, nullptr));
    fwd.state.source_stage = static_cast<uint32_t>(server_.stage_index_);
    SKIPPY_TRY(downstream_.send_request(fwd));
    pending_forward_us_ = std::max(pending_forward_us_, measured_us_since(t0));
    SKIPPY_TRY(read_downstream(fwd.request_id, &reply));
    // The reply goes upstream as (part of) this stage's ack: report the forward time there.
    reply.stats.max_forward_us = std::max(reply.stats.max_forward_us, take_pending_forward_us());
    return status::ok();
}

stage_server::stage_server(std::unique_ptr<stage> st, std::unique_ptr<stage_cache_host> cache, int32_t stage_index, topology topo,
                           tcp_listener listener, const chain_options & options)
    : stage_(std::move(st)), cache_(std::move(cache)), stage_index_(stage_index), topo_(std::move(topo)),
      listener_(std::move(listener)), options_(options), handshakes_(options.link.max_pending_handshakes) {
    for (int32_t i = 0; i < stage_->n_lanes(); ++i) lanes_.push_back(std::make_unique<lane_slot>());
}

stage_server::~stage_server() { stop(); }

void stage_server::start() {
    acceptor_ = std::thread([this] { accept_loop(); });
}

void stage_server::stop() {
    if (stopping_.exchange(true)) return;
    if (acceptor_.joinable()) acceptor_.join();
    listener_.close();
    handshakes_.stop();  // no lane starts after this
    for (auto & slot : lanes_) {
        {
            std::lock_guard<std::mutex> lock(slot->mutex);
            if (slot->upstream) slot->upstream->shutdown();
            if (slot->downstream) slot->downstream->shutdown();
        }
        if (slot->worker.joinable()) slot->worker.join();
    }
}

void stage_server::accept_loop() {
    while (!stopping_.load()) {
        auto accepted = listener_.accept(std::chrono::milliseconds(100));
        if (!accepted.is_ok()) continue;
        // The hello is read on a handshake thread: a dialer that says nothing must not
        // hold up the next connection.
        const bool started = handshakes_.start(std::move(accepted).value(), [this](handshake_pool::pending & p) {
            auto hello = answer_hello(p.socket(), options_.link, [&](const protocol::hello & h) -> status {
                if (h.link != protocol::link_kind::forward) {
                    return make_error(error_code::invalid_argument, "stage " + std::to_string(stage_index_) + " takes forward links only");
                }
                if (h.lane >= static_cast<uint32_t>(stage_->n_lanes())) {
                    return make_error(error_code::invalid_argument, "lane " + std::to_string(h.lane) + " does not exist (this stage has " +
                                                                        std::to_string(stage_->n_lanes()) + " lanes)");
                }
                if (h.sender_stage + 1 != static_cast<uint32_t>(stage_index_)) {
                    return make_error(error_code::invalid_argument, "stage " + std::to_string(h.sender_stage) + " is not upstream of stage " +
                                                                        std::to_string(stage_index_));
                }
                return status::ok();
            });
            if (!hello.is_ok()) {
                SKIPPY_LOG_WARN("stage %d: refused a connection: %s", stage_index_, hello.error().to_string().c_str());
                return;
            }
            start_lane(static_cast<int32_t>(hello->lane), stage_link(p.take(), options_.link, "stage " + std::to_string(stage_index_ - 1)));
        });
        if (!started) {
            SKIPPY_LOG_WARN("stage %d: closed a connection: %d handshakes already pending", stage_index_,
                            options_.link.max_pending_handshakes);
        }
    }
}

void stage_server::start_lane(int32_t lane, stage_link upstream) {
    lane_slot & slot = *lanes_[static_cast<size_t>(lane)];
    std::lock_guard<std::mutex> start_lock(slot.start_mutex);
    if (stopping_.load()) return;
    {
        // A new connection for a lane replaces the old one (stage 0 rebuilt the lane).
        std::lock_guard<std::mutex> lock(slot.mutex);
        if (slot.upstream) slot.upstream->shutdown();
        if (slot.downstream) slot.downstream->shutdown();
    }
    if (slot.worker.joinable()) slot.worker.join();
    slot.worker = std::thread([this, lane, up = std::move(upstream)]() mutable {
        lane_worker worker(*this, lane, std::move(up));
        worker.run();
    });
}

}  // namespace skippy::transport
