#include "transport/stage_server.h"

#include "base/log.h"
#include "transport/convert.h"
#include "transport/timing.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace skippy::transport {

using protocol::message_kind;

namespace {

bool is_streamed(message_kind k) {
    return k == message_kind::prefill || k == message_kind::prefill_final || k == message_kind::decode;
}

step_kind step_kind_of(message_kind k) {
    switch (k) {
        case message_kind::prefill: return step_kind::prefill;
        case message_kind::prefill_final: return step_kind::prefill_final;
        default: return step_kind::decode;
    }
}

}  // namespace

// A lane's forward link from stage k-1, for the life of that connection: its control
// messages, and Prefill/Decode requests sent on it rather than in steps.
class stage_server::lane_worker {
public:
    lane_worker(stage_server & server, int32_t lane, stage_link upstream)
        : server_(server), stage_(*server.stage_), lane_(lane), slot_(*server.lanes_[static_cast<size_t>(lane)]),
          session_(slot_.session), upstream_(std::move(upstream)), is_final_(stage_.is_last()), n_embd_(stage_.hparams().n_embd),
          me_("stage " + std::to_string(server.stage_index_)), downstream_([this] { return dial_next(); }, server.options_.credit_window,
                      std::max(1, server.topo_.n_stages() - 1 - server.stage_index_)),
          runner_(stage_) {}

    void run();

private:
    status handle(protocol::request & req);
    status handle_streamed(protocol::request & req);
    status handle_configure(const protocol::request & req, protocol::reply & ack);
    status handle_probe(const protocol::request & req, protocol::reply & ack);
    status handle_try_restore(const protocol::request & req, protocol::reply & ack);
    status handle_try_restore_decode(protocol::request & req, protocol::reply & out);

    status check_activation(const protocol::request & req, int64_t rows) const;
    status forward_streamed(protocol::request req, const protocol::stats_block & stats, std::span<const float> rows);
    status forward_sync(protocol::request fwd, protocol::reply & reply);
    result<stage_link> dial_next();

    stage_server &           server_;
    stage &                  stage_;
    const int32_t            lane_;
    lane_slot &              slot_;
    lane_session &           session_;
    stage_link               upstream_;
    const bool               is_final_;
    const int32_t            n_embd_;
    const std::string        me_;
    downstream_link          downstream_;  // non-final stages: the lane's forward link to the next stage
    step_runner              runner_;
    uint64_t                 current_request_ = 0;
    clock::time_point        received_at_;  // when current_request_'s frame was read
};

void stage_server::lane_worker::run() {
    {
        std::lock_guard<std::mutex> session_lock(slot_.session_mutex);
        session_.reset();
        slot_.configured = false;
        std::lock_guard<std::mutex> lock(slot_.mutex);
        slot_.upstream = &upstream_;
        slot_.downstream = &downstream_;
        slot_.failed = false;
    }
    SKIPPY_LOG_DEBUG("%s: lane %d connected", me_.c_str(), lane_);

    status failure;
    // Between requests the lane's link to the next stage carries nothing but
    // heartbeats, checked in short slices (docs/transport.md, "Liveness").
    const bool heartbeats = !is_final_ && server_.options_.link.liveness.heartbeat_interval.count() > 0;
    const auto slice = heartbeats ? std::chrono::milliseconds(50) : std::chrono::milliseconds(1000);
    while (!server_.stopping_.load()) {
        int below = -1;
        if (is_final_) {
            std::lock_guard<std::mutex> lock(slot_.mutex);
            below = slot_.returns.fd();
        } else {
            below = downstream_.fd();
        }
        const int fds[2] = {upstream_.fd(), below};
        const int ready = wait_readable(std::span<const int>(fds, below >= 0 ? 2 : 1), clock::now() + slice);
        if (ready < 0) {
            if (!heartbeats) continue;
            bool idle = false;
            {
                std::lock_guard<std::mutex> session_lock(slot_.session_mutex);
                idle = !slot_.configured;
            }
            // A busy lane is watched by the deadlines of its requests. A dead next
            // stage fails the lane end to end, so stage 0 learns it before a request.
            if (idle) failure = downstream_.check_heartbeat(clock::now(), true);
            if (!failure.is_ok()) break;
            continue;
        }
        if (ready == 1) {
            if (is_final_) {
                // Stage 0 never writes on the return link: readable means it closed it.
                std::lock_guard<std::mutex> session_lock(slot_.session_mutex);
                std::lock_guard<std::mutex> lock(slot_.mutex);
                slot_.returns.close();
                continue;
            }
            failure = downstream_.read_one(0, nullptr);
            if (!failure.is_ok()) break;
            continue;
        }
        auto req = upstream_.read_request(upstream_.frame_deadline());
        if (!req.is_ok()) {
            // A close between frames ends the lane quietly (so does our own shutdown when
            // a step failed the lane); anything else (a truncated or malformed frame)
            // is a failure, logged and answered below.
            if (!upstream_.peer_closed()) failure = req.error();
            break;
        }
        received_at_ = clock::now();
        current_request_ = req->request_id;
        std::lock_guard<std::mutex> session_lock(slot_.session_mutex);
        failure = handle(*req);
        if (!failure.is_ok()) break;
    }
    if (!failure.is_ok() && !server_.stopping_.load()) server_.fail_lane(lane_, current_request_, failure);
    {
        std::lock_guard<std::mutex> session_lock(slot_.session_mutex);
        session_.reset();
        slot_.configured = false;
        std::lock_guard<std::mutex> lock(slot_.mutex);
        slot_.upstream = nullptr;
        slot_.downstream = nullptr;
        upstream_.close();
        slot_.returns.close();
    }
    downstream_.close();
}

status stage_server::lane_worker::handle(protocol::request & req) {
    if (is_streamed(req.kind)) return handle_streamed(req);
    protocol::reply ack;
    ack.kind = message_kind::ack;
    ack.request_id = req.request_id;
    switch (req.kind) {
        case message_kind::heartbeat: {
            // Answered here, never forwarded: it asks about this link only.
            std::lock_guard<std::mutex> write_lock(slot_.write_mutex);
            return upstream_.send_reply(ack);
        }
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
                if (is_final_) ack.stats = protocol::merge_stats(ack.stats, session_.pending_stats);
                session_.pending_stats = {};
                add_cache_counters(ack.stats, session_.cache().stop({req.request_id, req.kind}));
                stage_.truncate_lane(lane_, 0);
                session_.stop_sampling();
                slot_.configured = false;
            } else {
                if (req.pos_start == 0) session_.cache().rollback();
                stage_.truncate_lane(lane_, req.pos_start);
                session_.trim_tokens(req.pos_start);
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
    ack.stats.max_forward_us = std::max(ack.stats.max_forward_us, session_.take_pending_forward_us());
    std::lock_guard<std::mutex> write_lock(slot_.write_mutex);
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

// A Prefill or Decode on the lane's own link: a step of this lane alone, forwarded on
// the lane's link (or sampled) as it came.
status stage_server::lane_worker::handle_streamed(protocol::request & req) {
    const auto t0 = clock::now();
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    SKIPPY_TRY(check_activation(req, n));
    step_item it;
    it.lane = lane_;
    it.request_id = req.request_id;
    it.kind = step_kind_of(req.kind);
    it.pos_start = req.pos_start;
    it.tokens = req.tokens;
    it.rows_in = req.activation->values;
    runner_.run(std::span<step_item>(&it, 1), *server_.sessions_);
    SKIPPY_TRY(it.result);

    protocol::stats_block local;
    if (it.n_computed() > 0) local.max_queue_us = measured_us_since(received_at_);
    cache::cache_counters counters = session_.step_counters;
    if (it.kind != step_kind::decode) {
        counters.merge(session_.cache().record_if_final(req.pos_start + n, it.kind == step_kind::prefill_final, {req.request_id, req.kind}));
    }
    local.max_compute_us = micros_since(t0);
    add_cache_counters(local, counters);
    const protocol::stats_block merged = protocol::merge_stats(req.stats, local);
    if (is_final_) {
        if (req.kind == message_kind::prefill) {
            session_.pending_stats = protocol::merge_stats(session_.pending_stats, merged);
        } else {
            protocol::reply tok;
            tok.kind = message_kind::predicted_token;
            tok.request_id = req.request_id;
            tok.token = it.sampled;
            tok.decode_step = req.state.decode_step;
            put_logprobs(tok, it.logprobs);
            tok.stats = merged;
            SKIPPY_TRY(server_.send_token(slot_, tok));
        }
    } else {
        SKIPPY_TRY(forward_streamed(std::move(req), merged, runner_.rows(it)));
    }
    protocol::reply ack;
    ack.kind = message_kind::ack;
    ack.request_id = current_request_;
    ack.stats = local;
    std::lock_guard<std::mutex> write_lock(slot_.write_mutex);
    return upstream_.send_reply(ack);
}

status stage_server::lane_worker::forward_streamed(protocol::request fwd, const protocol::stats_block & stats, std::span<const float> rows) {
    fwd.state.source_stage = static_cast<uint32_t>(server_.stage_index_);
    fwd.stats = stats;
    // This frame's own forward time is only known once it is sent: it rides with the next one.
    fwd.stats.max_forward_us = std::max(fwd.stats.max_forward_us, session_.take_pending_forward_us());
    fwd.activation = session_.output_frame(rows);
    uint32_t forward_us = 0;
    SKIPPY_TRY(downstream_.send_streamed(fwd, &forward_us));
    session_.note_forward_us(forward_us);
    return status::ok();
}

status stage_server::lane_worker::handle_configure(const protocol::request & req, protocol::reply & ack) {
    if (!req.generation) return make_error(error_code::invalid_data, "ConfigureGeneration without a config");
    stage_.truncate_lane(lane_, 0);
    session_.cache().configure(req.generation->cache_key, to_cache_mode(req.generation->cache_mode), req.state.prompt_token_count);
    session_.pending_stats = {};
    if (is_final_) {
        sampling_config sc = to_sampling_config(req.generation->sampling);
        SKIPPY_TRY(sc.validate(stage_.hparams().n_vocab));
        SKIPPY_TRY(session_.start_sampling(std::move(sc)));
        SKIPPY_TRY(server_.connect_return(slot_));  // before stage 0 hears the ack
        slot_.configured = true;
        return status::ok();
    }
    protocol::reply down;
    SKIPPY_TRY(forward_sync(req, down));
    ack.stats = down.stats;
    slot_.configured = true;
    return status::ok();
}

status stage_server::lane_worker::handle_probe(const protocol::request & req, protocol::reply & ack) {
    lane_cache & cache = session_.cache();
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    auto here = [&](int64_t m) { return cache.probe(std::span<const token_id>(req.tokens).first(static_cast<size_t>(m)), {req.request_id, req.kind}); };
    std::function<result<int64_t>(int64_t)> below;
    if (!is_final_) {
        below = [&](int64_t m) -> result<int64_t> {
            protocol::request fwd = req;
            fwd.tokens.resize(static_cast<size_t>(m));
            protocol::reply down;
            SKIPPY_TRY(forward_sync(std::move(fwd), down));
            ack.stats = protocol::merge_stats(ack.stats, down.stats);
            return down.restored_tokens;
        };
    }
    SKIPPY_ASSIGN_OR_RETURN(const int64_t restorable, agree_on_prefix(n, cache.min_tokens(), here, below));
    ack.restored_tokens = restorable;
    ack.outcome = restorable == n ? protocol::ack_outcome::hit : restorable > 0 ? protocol::ack_outcome::short_hit : protocol::ack_outcome::miss;
    return status::ok();
}

// TryRestorePrefill: all of `tokens` or nothing, here and below; a miss below rolls
// this stage back. RestorePrefill: the same, without the rollback.
status stage_server::lane_worker::handle_try_restore(const protocol::request & req, protocol::reply & ack) {
    lane_cache & cache = session_.cache();
    const bool try_kind = req.kind == message_kind::try_restore_prefill;
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const auto r = cache.restore(req.tokens, n, try_kind ? cache::lookup_kind::try_restore : cache::lookup_kind::restore, false,
                                 {req.request_id, req.kind});
    add_cache_counters(ack.stats, r.counters);
    const bool hit = r.outcome == cache::lookup_outcome::hit && r.restored_tokens == n;
    if (hit) session_.track_tokens(0, req.tokens);
    ack.outcome = hit ? protocol::ack_outcome::hit : to_ack_outcome(r.outcome);
    ack.restored_tokens = hit ? n : 0;
    if (is_final_ || (!hit && try_kind)) return status::ok();
    protocol::reply down;
    SKIPPY_TRY(forward_sync(req, down));
    ack.stats = protocol::merge_stats(ack.stats, down.stats);
    if (down.outcome != protocol::ack_outcome::hit) {
        if (hit && try_kind) cache.rollback();
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
    if (is_final_ && !session_.sampling()) return make_error(error_code::invalid_data, "TryRestorePrefillDecode before ConfigureGeneration");
    lane_cache & cache = session_.cache();
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const auto r = cache.restore(req.tokens, n, cache::lookup_kind::try_restore_decode, false, {req.request_id, req.kind});
    add_cache_counters(out.stats, r.counters);
    if (r.outcome != cache::lookup_outcome::hit || r.restored_tokens != n) {
        out.outcome = to_ack_outcome(r.outcome == cache::lookup_outcome::hit ? cache::lookup_outcome::short_ : r.outcome);
        if (r.restored_tokens > 0) cache.rollback();
        return status::ok();
    }
    const token_id current = req.state.current_token;
    const std::span<const token_id> one(&current, 1);
    out.stats.max_queue_us = measured_us_since(received_at_);
    SKIPPY_TRY(session_.compute(req.pos_start + n, one, req.activation->values));
    out.stats.max_compute_us = micros_since(t0);
    cache.note_prefill(req.pos_start + n, one);
    if (is_final_) {
        session_.track_tokens(0, req.tokens);
        session_.track_tokens(n, one);
        out.kind = message_kind::predicted_token;
        token_logprobs logprobs;
        SKIPPY_ASSIGN_OR_RETURN(out.token, session_.sample_last_row(&logprobs));
        put_logprobs(out, logprobs);
        out.decode_step = req.state.decode_step;
        out.restored_tokens = n;
        return status::ok();
    }
    protocol::request fwd = std::move(req);
    fwd.activation = session_.output_frame();
    fwd.stats = protocol::merge_stats(fwd.stats, out.stats);
    protocol::reply down;
    SKIPPY_TRY(forward_sync(std::move(fwd), down));
    if (down.kind == message_kind::predicted_token) {
        down.stats = protocol::merge_stats(down.stats, out.stats);
        out = std::move(down);
        return status::ok();
    }
    cache.rollback();
    out.stats = protocol::merge_stats(out.stats, down.stats);
    out.outcome = down.outcome == protocol::ack_outcome::hit ? protocol::ack_outcome::miss : down.outcome;
    return status::ok();
}

result<stage_link> stage_server::lane_worker::dial_next() {
    protocol::hello h;
    h.link = protocol::link_kind::forward;
    h.lane = static_cast<uint32_t>(lane_);
    h.sender_stage = static_cast<uint32_t>(server_.stage_index_);
    const int32_t next = server_.stage_index_ + 1;
    const auto & ep = server_.topo_.stages[static_cast<size_t>(next)].address;
    return connect_link(ep, h, server_.options_.link, "stage " + std::to_string(next) + " (" + ep.to_string() + ")");
}

// A control request goes downstream once every request before it — the lane's steps
// on the batch link, its streamed requests on its own link — is acked.
status stage_server::lane_worker::forward_sync(protocol::request fwd, protocol::reply & reply) {
    if (server_.batch_down_) server_.batch_down_->wait_idle(lane_);
    fwd.state.source_stage = static_cast<uint32_t>(server_.stage_index_);
    uint32_t forward_us = 0;
    SKIPPY_TRY(downstream_.roundtrip(fwd, reply, &forward_us));
    session_.note_forward_us(forward_us);
    // The reply goes upstream as (part of) this stage's ack: report the forward time there.
    reply.stats.max_forward_us = std::max(reply.stats.max_forward_us, session_.take_pending_forward_us());
    return status::ok();
}

// ---------------------------------------------------------------------------------

stage_server::stage_server(std::unique_ptr<stage> st, std::unique_ptr<stage_cache_host> cache, int32_t stage_index, topology topo,
                           tcp_listener listener, const chain_options & options)
    : stage_(std::move(st)), cache_(std::move(cache)), stage_index_(stage_index), topo_(std::move(topo)),
      listener_(std::move(listener)), options_(options), handshakes_(options.link.max_pending_handshakes, options.link.max_pending_handshakes_per_address), batch_runner_(*stage_) {
    for (int32_t i = 0; i < stage_->n_lanes(); ++i) lanes_.push_back(std::make_unique<lane_slot>(*stage_, cache_.get(), i, stage_index_));
    sessions_ = std::make_unique<session_lanes>([this](int32_t lane) { return &lanes_[static_cast<size_t>(lane)]->session; }, true);
    if (!stage_->is_last()) {
        auto dial = [this]() -> result<stage_link> {
            protocol::hello h;
            h.link = protocol::link_kind::batch;
            h.sender_stage = static_cast<uint32_t>(stage_index_);
            const int32_t next = stage_index_ + 1;
            const auto & ep = topo_.stages[static_cast<size_t>(next)].address;
            return connect_link(ep, h, options_.link, "stage " + std::to_string(next) + " (" + ep.to_string() + ", steps)");
        };
        batch_down_ = std::make_unique<batch_link>(std::move(dial), options_.credit_window, stage_->n_lanes(),
                                                   [this](const status & why, const std::vector<int32_t> & lanes) {
                                                       for (int32_t lane : lanes) fail_lane(lane, 0, why);
                                                   });
    }
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
    {
        std::lock_guard<std::mutex> lock(batch_mutex_);
        if (batch_upstream_) batch_upstream_->shutdown();
    }
    if (batch_worker_.joinable()) batch_worker_.join();
    if (batch_down_) batch_down_->close();
    for (auto & slot : lanes_) {
        {
            std::lock_guard<std::mutex> lock(slot->mutex);
            if (slot->upstream) slot->upstream->shutdown();
            if (slot->downstream) slot->downstream->shutdown();
            slot->returns.shutdown();
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
        const int64_t evicted = handshakes_.n_evicted();
        const bool started = handshakes_.start(std::move(accepted).value(), [this](handshake_pool::pending & p) {
            auto hello = answer_hello(p.socket(), options_.link, [&](const protocol::hello & h) -> status {
                const std::string me = "stage " + std::to_string(stage_index_);
                if (h.link != protocol::link_kind::forward && h.link != protocol::link_kind::batch) {
                    return make_error(error_code::invalid_argument, me + " takes forward links only (for lanes and for their steps)");
                }
                if (h.link == protocol::link_kind::batch && h.lane != 0) {
                    return make_error(error_code::invalid_argument, "a batch link names lane 0, not " + std::to_string(h.lane));
                }
                if (h.lane >= static_cast<uint32_t>(stage_->n_lanes())) {
                    return make_error(error_code::invalid_argument, "lane " + std::to_string(h.lane) + " does not exist (this stage has " +
                                                                        std::to_string(stage_->n_lanes()) + " lanes)");
                }
                if (h.sender_stage + 1 != static_cast<uint32_t>(stage_index_)) {
                    return make_error(error_code::invalid_argument, "stage " + std::to_string(h.sender_stage) + " is not upstream of " + me);
                }
                return status::ok();
            });
            if (!hello.is_ok()) {
                SKIPPY_LOG_WARN("stage %d: refused a connection: %s", stage_index_, hello.error().to_string().c_str());
                return;
            }
            const std::string peer = "stage " + std::to_string(stage_index_ - 1);
            const protocol::hello h = hello->hello;
            if (h.link == protocol::link_kind::batch) {
                start_batch(stage_link(p.take(), options_.link, peer + " (steps)", std::move(hello->macs)));
            } else {
                start_lane(static_cast<int32_t>(h.lane), stage_link(p.take(), options_.link, peer, std::move(hello->macs)));
            }
        });
        if (started && handshakes_.n_evicted() > evicted) {
            SKIPPY_LOG_WARN("stage %d: too many pending handshakes: closed the oldest to make room", stage_index_);
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
        slot.returns.shutdown();
    }
    if (slot.worker.joinable()) slot.worker.join();
    slot.worker = std::thread([this, lane, up = std::move(upstream)]() mutable {
        lane_worker worker(*this, lane, std::move(up));
        worker.run();
    });
}

// A new batch link replaces the old one, as a lane's link does.
void stage_server::start_batch(stage_link upstream) {
    std::lock_guard<std::mutex> start_lock(batch_start_mutex_);
    if (stopping_.load()) return;
    {
        std::lock_guard<std::mutex> lock(batch_mutex_);
        if (batch_upstream_) batch_upstream_->shutdown();
    }
    if (batch_worker_.joinable()) batch_worker_.join();
    batch_worker_ = std::thread([this, up = std::move(upstream)]() mutable { batch_loop(up); });
}

void stage_server::batch_loop(stage_link & upstream) {
    {
        std::lock_guard<std::mutex> lock(batch_mutex_);
        batch_upstream_ = &upstream;
    }
    const std::string me = "stage " + std::to_string(stage_index_);
    uint64_t step_id = 0;
    status failure;
    while (!stopping_.load()) {
        const int fd = upstream.fd();
        if (wait_readable(std::span<const int>(&fd, 1), clock::now() + std::chrono::seconds(1)) < 0) continue;
        uint64_t heartbeat_id = 0;
        auto step = upstream.read_step_or_heartbeat(upstream.frame_deadline(), &heartbeat_id);
        if (!step.is_ok()) {
            if (!upstream.peer_closed()) failure = step.error();
            break;
        }
        protocol::reply ack;
        ack.kind = message_kind::ack;
        if (step->has_value()) {
            step_id = (*step)->step_id;
            failure = run_step(**step, clock::now());
            if (!failure.is_ok()) break;
            ack.request_id = step_id;
        } else {
            ack.request_id = heartbeat_id;  // answered at once: this stage is alive
        }
        failure = upstream.send_reply(ack);
        if (!failure.is_ok()) break;
    }
    if (!failure.is_ok() && !stopping_.load()) {
        // A bad step may have named any lane: every lane fails with the reason.
        SKIPPY_LOG_WARN("%s: batch link closed: %s", me.c_str(), failure.to_string().c_str());
        {
            std::lock_guard<std::mutex> lock(batch_mutex_);
            (void)upstream.send_reply(protocol::make_error_reply(step_id, failure.with_context(me), options_.link.limits));
        }
        fail_all_lanes(failure.with_context(me + " (steps)"));
    }
    std::lock_guard<std::mutex> lock(batch_mutex_);
    batch_upstream_ = nullptr;
    upstream.close();
}

status stage_server::run_step(protocol::step_frame & step, clock::time_point received_at) {
    const int32_t n_embd = stage_->hparams().n_embd;
    const auto & act = step.activation;
    if (static_cast<int32_t>(act.n_embd) != n_embd) {
        return make_error(error_code::invalid_data, "step activation width " + std::to_string(act.n_embd) + " but the model's is " +
                                                        std::to_string(n_embd));
    }
    if (static_cast<int32_t>(act.layer_end) != stage_->slice().range().start) {
        return make_error(error_code::invalid_data, "step activation covers layers up to " + std::to_string(act.layer_end) +
                                                        " but this stage starts at " + std::to_string(stage_->slice().range().start));
    }
    for (const auto & e : step.entries) {
        if (e.session_id >= static_cast<uint64_t>(stage_->n_lanes())) {
            return make_error(error_code::invalid_data, "step entry for lane " + std::to_string(e.session_id) + ", but this stage has " +
                                                            std::to_string(stage_->n_lanes()) + " lanes");
        }
    }
    // Lock the step's lanes in lane order (the decoder checked they are distinct).
    std::vector<size_t> order(step.entries.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return step.entries[a].session_id < step.entries[b].session_id; });
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(order.size());
    for (size_t i : order) locks.emplace_back(lanes_[static_cast<size_t>(step.entries[i].session_id)]->session_mutex);

    // Entries of a lane that is not configured are from before its failure or reset
    // (stage 0 stopped them once it knew): nobody waits for them.
    std::vector<step_item> items;
    std::vector<size_t> entry_of;
    size_t row = 0;
    for (size_t i = 0; i < step.entries.size(); ++i) {
        const auto & e = step.entries[i];
        const size_t n = e.tokens.size();
        lane_slot & slot = *lanes_[static_cast<size_t>(e.session_id)];
        bool live = slot.configured;
        {
            std::lock_guard<std::mutex> lock(slot.mutex);
            live = live && !slot.failed;
        }
        if (live) {
            step_item it;
            it.lane = static_cast<int32_t>(e.session_id);
            it.request_id = e.request_id;
            it.kind = step_kind_of(e.kind);
            it.pos_start = e.pos_start;
            it.tokens = e.tokens;
            it.rows_in = std::span<const float>(act.values).subspan(row * static_cast<size_t>(n_embd), n * static_cast<size_t>(n_embd));
            items.push_back(it);
            entry_of.push_back(i);
        }
        row += n;
    }
    const auto t0 = clock::now();
    batch_runner_.run(items, *sessions_);
    const uint32_t compute_us = micros_since(t0);
    if (!items.empty()) {
        int64_t n_tokens = 0;
        for (const auto & it : items) n_tokens += static_cast<int64_t>(it.tokens.size());
        const std::vector<double> waits(items.size(), std::chrono::duration<double>(t0 - received_at).count());
        steps_.observe(static_cast<int64_t>(items.size()), n_tokens, waits);
    }

    protocol::step_frame out;
    out.step_id = step.step_id;
    out.source_stage = static_cast<uint32_t>(stage_index_);
    for (size_t k = 0; k < items.size(); ++k) {
        step_item & it = items[k];
        protocol::step_entry & e = step.entries[entry_of[k]];
        lane_slot & slot = *lanes_[static_cast<size_t>(it.lane)];
        lane_session & session = slot.session;
        if (!it.result.is_ok()) {
            fail_lane(it.lane, e.request_id, it.result);
            continue;
        }
        protocol::stats_block local;
        if (it.n_computed() > 0) local.max_queue_us = measured_us_since(received_at);
        cache::cache_counters counters = session.step_counters;
        if (it.kind != step_kind::decode) {
            counters.merge(session.cache().record_if_final(it.pos_start + static_cast<int64_t>(it.tokens.size()),
                                                           it.kind == step_kind::prefill_final, {e.request_id, e.kind}));
        }
        local.max_compute_us = compute_us;
        add_cache_counters(local, counters);
        const protocol::stats_block merged = protocol::merge_stats(e.stats, local);
        if (stage_->is_last()) {
            if (it.kind == step_kind::prefill) {
                session.pending_stats = protocol::merge_stats(session.pending_stats, merged);
                continue;
            }
            protocol::reply tok;
            tok.kind = message_kind::predicted_token;
            tok.request_id = e.request_id;
            tok.token = it.sampled;
            tok.decode_step = e.state.decode_step;
            put_logprobs(tok, it.logprobs);
            tok.stats = merged;
            const status st = send_token(slot, tok);
            if (!st.is_ok()) fail_lane(it.lane, e.request_id, st);
            continue;
        }
        e.stats = merged;
        e.stats.max_forward_us = std::max(e.stats.max_forward_us, session.take_pending_forward_us());
        e.state.source_stage = static_cast<uint32_t>(stage_index_);
        const auto rows = batch_runner_.rows(it);
        out.activation.values.insert(out.activation.values.end(), rows.begin(), rows.end());
        out.entries.push_back(std::move(e));
    }
    if (out.entries.empty()) return status::ok();
    out.activation.producer_stage = static_cast<uint32_t>(stage_index_);
    out.activation.layer_start = static_cast<uint32_t>(stage_->slice().range().start);
    out.activation.layer_end = static_cast<uint32_t>(stage_->slice().range().end);
    out.activation.n_embd = static_cast<uint32_t>(n_embd);
    uint32_t forward_us = 0;
    const status sent = batch_down_->send(out, &forward_us);
    for (const auto & e : out.entries) {
        const int32_t lane = static_cast<int32_t>(e.session_id);
        if (sent.is_ok()) {
            lanes_[static_cast<size_t>(lane)]->session.note_forward_us(forward_us);
        } else {
            fail_lane(lane, e.request_id, sent);
        }
    }
    return status::ok();
}

// REQUIRES: slot.session_mutex held (tokens and the lane's other writes on the return
// link do not interleave).
status stage_server::send_token(lane_slot & slot, const protocol::reply & token) {
    protocol::reply tok = token;
    tok.stats = protocol::merge_stats(slot.session.pending_stats, tok.stats);
    tok.stats.max_forward_us = std::max(tok.stats.max_forward_us, slot.session.take_pending_forward_us());
    slot.session.pending_stats = {};
    const auto t0 = clock::now();
    SKIPPY_TRY(connect_return(slot));
    {
        std::lock_guard<std::mutex> write_lock(slot.write_mutex);
        SKIPPY_TRY(slot.returns.send_reply(tok));
    }
    slot.session.note_forward_us(measured_us_since(t0));  // reported with the next token or reply
    return status::ok();
}

// The final stage's direct return link to stage 0, opened with PredictionReturnOpen.
// REQUIRES: slot.session_mutex held.
status stage_server::connect_return(lane_slot & slot) {
    if (slot.returns.connected()) return status::ok();
    const int32_t lane = slot.session.lane();
    protocol::hello h;
    h.link = protocol::link_kind::direct_return;
    h.lane = static_cast<uint32_t>(lane);
    h.sender_stage = static_cast<uint32_t>(stage_index_);
    const auto & ep = topo_.stages[0].address;
    SKIPPY_ASSIGN_OR_RETURN(stage_link l, connect_link(ep, h, options_.link, "stage 0 (" + ep.to_string() + ")"));
    protocol::request open;
    open.kind = message_kind::prediction_return_open;
    open.session_id = static_cast<uint64_t>(lane);
    open.state.phase = protocol::message_phase::control;
    open.state.source_stage = static_cast<uint32_t>(stage_index_);
    SKIPPY_TRY(l.send_request(open));
    std::lock_guard<std::mutex> lock(slot.mutex);
    slot.returns = std::move(l);
    return status::ok();
}

void stage_server::fail_lane(int32_t lane, uint64_t request_id, const status & why) {
    lane_slot & slot = *lanes_[static_cast<size_t>(lane)];
    const std::string me = "stage " + std::to_string(stage_index_);
    std::lock_guard<std::mutex> lock(slot.mutex);
    if (slot.failed || !slot.upstream) return;
    slot.failed = true;
    SKIPPY_LOG_WARN("%s: lane %d closed: %s", me.c_str(), lane, why.to_string().c_str());
    const status reason = why.with_context(me);
    std::lock_guard<std::mutex> write_lock(slot.write_mutex);
    (void)slot.upstream->send_reply(protocol::make_error_reply(request_id, reason, options_.link.limits));
    slot.upstream->shutdown();
    // Stage 0 may be waiting on the return link: tell it the reason there too.
    if (slot.returns.connected()) {
        (void)slot.returns.send_reply(protocol::make_error_reply(request_id, reason, options_.link.limits));
        slot.returns.shutdown();
    }
    if (slot.downstream) slot.downstream->shutdown();
}

void stage_server::fail_all_lanes(const status & why) {
    for (int32_t lane = 0; lane < stage_->n_lanes(); ++lane) fail_lane(lane, 0, why);
}

}  // namespace skippy::transport
