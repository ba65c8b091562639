#include "transport/stage_server.h"

#include "base/log.h"
#include "runtime/sampler.h"
#include "transport/convert.h"

#include <chrono>

namespace skippy::transport {
namespace {

using protocol::message_kind;

uint32_t micros_since(clock::time_point t0) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count();
    return us > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(us);
}

bool is_streamed(message_kind k) {
    return k == message_kind::prefill || k == message_kind::prefill_final || k == message_kind::decode;
}

}  // namespace

stage_server::stage_server(std::unique_ptr<stage> st, int32_t stage_index, topology topo, tcp_listener listener,
                           const chain_options & options)
    : stage_(std::move(st)), stage_index_(stage_index), topo_(std::move(topo)), listener_(std::move(listener)),
      options_(options) {
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
        tcp_socket socket = std::move(accepted).value();
        auto hello = answer_hello(socket, options_.link, [&](const protocol::hello & h) -> status {
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
            continue;
        }
        const int32_t lane = static_cast<int32_t>(hello->lane);
        start_lane(lane, stage_link(std::move(socket), options_.link, "stage " + std::to_string(stage_index_ - 1)));
    }
}

void stage_server::start_lane(int32_t lane, stage_link upstream) {
    lane_slot & slot = *lanes_[static_cast<size_t>(lane)];
    {
        // A new connection for a lane replaces the old one (stage 0 rebuilt the lane).
        std::lock_guard<std::mutex> lock(slot.mutex);
        if (slot.upstream) slot.upstream->shutdown();
        if (slot.downstream) slot.downstream->shutdown();
    }
    if (slot.worker.joinable()) slot.worker.join();
    slot.worker = std::thread([this, lane, up = std::move(upstream)]() mutable { lane_main(lane, std::move(up)); });
}

// The lane's message loop. Everything the lane owns lives on this thread's stack.
void stage_server::lane_main(int32_t lane, stage_link upstream) {
    lane_slot & slot = *lanes_[static_cast<size_t>(lane)];
    const bool is_final = stage_->is_last();
    const int32_t n_embd = stage_->hparams().n_embd;
    const std::string me = "stage " + std::to_string(stage_index_);
    stage_link downstream;  // next stage (non-final) or stage 0's return link (final)
    int32_t outstanding = 0;  // streamed requests downstream has not acked yet
    std::unique_ptr<sampler> token_sampler;
    std::vector<float> hidden, logits;
    {
        std::lock_guard<std::mutex> lock(slot.mutex);
        slot.upstream = &upstream;
        slot.downstream = &downstream;
    }
    stage_->truncate_lane(lane, 0);
    SKIPPY_LOG_DEBUG("%s: lane %d connected", me.c_str(), lane);

    auto connect_downstream = [&]() -> status {
        if (downstream.connected()) return status::ok();
        protocol::hello h;
        h.lane = static_cast<uint32_t>(lane);
        h.sender_stage = static_cast<uint32_t>(stage_index_);
        if (is_final) {
            h.link = protocol::link_kind::direct_return;
            const auto & ep = topo_.stages[0].address;
            SKIPPY_ASSIGN_OR_RETURN(stage_link l, connect_link(ep, h, options_.link, "stage 0 (" + ep.to_string() + ")"));
            protocol::request open;
            open.kind = message_kind::prediction_return_open;
            open.session_id = static_cast<uint64_t>(lane);
            open.state.phase = protocol::message_phase::control;
            open.state.source_stage = static_cast<uint32_t>(stage_index_);
            SKIPPY_TRY(l.send_request(open));
            std::lock_guard<std::mutex> lock(slot.mutex);
            downstream = std::move(l);
        } else {
            h.link = protocol::link_kind::forward;
            const int32_t next = stage_index_ + 1;
            const auto & ep = topo_.stages[static_cast<size_t>(next)].address;
            SKIPPY_ASSIGN_OR_RETURN(stage_link l, connect_link(ep, h, options_.link,
                                                               "stage " + std::to_string(next) + " (" + ep.to_string() + ")"));
            std::lock_guard<std::mutex> lock(slot.mutex);
            downstream = std::move(l);
        }
        outstanding = 0;
        return status::ok();
    };
    // Reads one reply from downstream; acks return credit, an Error becomes ours.
    auto read_downstream = [&](uint64_t want_id, protocol::reply * out) -> status {
        SKIPPY_ASSIGN_OR_RETURN(protocol::reply r, downstream.read_reply(downstream.reply_deadline()));
        if (r.kind == message_kind::error) return protocol::error_reply_status(r).with_context(downstream.peer_name());
        if (out && r.request_id == want_id && r.kind != message_kind::ack) { *out = std::move(r); return status::ok(); }
        if (r.kind != message_kind::ack) {
            return make_error(error_code::invalid_data, downstream.peer_name() + " sent an unexpected " +
                                                            std::string(protocol::message_kind_name(r.kind)));
        }
        if (out && r.request_id == want_id) { *out = std::move(r); return status::ok(); }
        if (outstanding <= 0) return make_error(error_code::invalid_data, downstream.peer_name() + " acked more than was sent");
        --outstanding;
        return status::ok();
    };
    // A control request: forwarded once every streamed request before it is acked.
    auto forward_sync = [&](protocol::request fwd, protocol::reply & downstream_reply) -> status {
        SKIPPY_TRY(connect_downstream());
        while (outstanding > 0) SKIPPY_TRY(read_downstream(0, nullptr));
        fwd.state.source_stage = static_cast<uint32_t>(stage_index_);
        SKIPPY_TRY(downstream.send_request(fwd));
        return read_downstream(fwd.request_id, &downstream_reply);
    };

    status failure;
    uint64_t failed_request = 0;
    while (!stopping_.load()) {
        const int fds[2] = {upstream.fd(), downstream.connected() ? downstream.fd() : -1};
        const int ready = wait_readable(std::span<const int>(fds, downstream.connected() ? 2 : 1), clock::now() + std::chrono::seconds(1));
        if (ready < 0) continue;
        if (ready == 1) {
            if (is_final) {
                // Stage 0 never writes on the return link: readable means it closed it.
                std::lock_guard<std::mutex> lock(slot.mutex);
                downstream.close();
                continue;
            }
            failure = read_downstream(0, nullptr);
            if (!failure.is_ok()) break;
            continue;
        }
        auto req_or = upstream.read_request(upstream.reply_deadline());
        if (!req_or.is_ok()) {
            if (req_or.error().message().find("closed by the peer") == std::string::npos) failure = req_or.error();
            break;
        }
        protocol::request req = std::move(req_or).value();
        failed_request = req.request_id;
        const auto t0 = clock::now();
        protocol::reply ack;
        ack.kind = message_kind::ack;
        ack.request_id = req.request_id;

        if (is_streamed(req.kind)) {
            const int64_t n = static_cast<int64_t>(req.tokens.size());
            if (!req.activation) { failure = make_error(error_code::invalid_data, "prefill/decode without an activation frame"); break; }
            const auto & act = *req.activation;
            if (static_cast<int32_t>(act.n_embd) != n_embd) {
                failure = make_error(error_code::invalid_data, "activation width " + std::to_string(act.n_embd) + " but the model's is " + std::to_string(n_embd));
                break;
            }
            if (static_cast<int32_t>(act.layer_end) != stage_->slice().range().start) {
                failure = make_error(error_code::invalid_data, "activation covers layers up to " + std::to_string(act.layer_end) +
                                                                   " but this stage starts at " + std::to_string(stage_->slice().range().start));
                break;
            }
            hidden.resize(static_cast<size_t>(n * n_embd));
            failure = stage_->forward(lane, req.pos_start, req.tokens, act.values, n, hidden);
            if (!failure.is_ok()) break;
            protocol::stats_block local;
            local.max_compute_us = micros_since(t0);
            protocol::stats_block merged = protocol::merge_stats(req.stats, local);
            if (is_final) {
                if (!token_sampler) { failure = make_error(error_code::invalid_data, "prefill/decode before ConfigureGeneration"); break; }
                for (int32_t t : req.tokens) token_sampler->accept(t);
                if (req.kind != message_kind::prefill) {
                    logits.resize(static_cast<size_t>(stage_->hparams().n_vocab));
                    stage_->logits(std::span<const float>(hidden).subspan(static_cast<size_t>((n - 1) * n_embd)), 1, logits);
                    protocol::reply tok;
                    tok.kind = message_kind::predicted_token;
                    tok.request_id = req.request_id;
                    tok.token = token_sampler->sample(logits);
                    tok.decode_step = req.state.decode_step;
                    tok.stats = merged;
                    failure = connect_downstream();
                    if (failure.is_ok()) failure = downstream.send_reply(tok);
                    if (!failure.is_ok()) break;
                }
            } else {
                failure = connect_downstream();
                while (failure.is_ok() && outstanding >= options_.credit_window) failure = read_downstream(0, nullptr);
                if (!failure.is_ok()) break;
                protocol::request fwd = std::move(req);
                fwd.state.source_stage = static_cast<uint32_t>(stage_index_);
                fwd.stats = merged;
                auto & frame = *fwd.activation;
                frame.producer_stage = static_cast<uint32_t>(stage_index_);
                frame.layer_start = static_cast<uint32_t>(stage_->slice().range().start);
                frame.layer_end = static_cast<uint32_t>(stage_->slice().range().end);
                frame.dtype = protocol::activation_dtype::f32;
                frame.values.assign(hidden.begin(), hidden.end());
                failure = downstream.send_request(fwd);
                if (!failure.is_ok()) break;
                ++outstanding;
            }
            ack.stats = local;
            failure = upstream.send_reply(ack);
            if (!failure.is_ok()) break;
            continue;
        }

        switch (req.kind) {
            case message_kind::configure_generation: {
                if (!req.generation) { failure = make_error(error_code::invalid_data, "ConfigureGeneration without a config"); break; }
                stage_->truncate_lane(lane, 0);
                if (is_final) {
                    sampling_config sc = to_sampling_config(req.generation->sampling);
                    failure = sc.validate();
                    if (failure.is_ok()) token_sampler = std::make_unique<sampler>(std::move(sc));
                    if (failure.is_ok()) failure = connect_downstream();
                } else {
                    protocol::reply down;
                    failure = forward_sync(req, down);
                    ack.stats = down.stats;
                }
                break;
            }
            case message_kind::stop:
            case message_kind::trim_session: {
                if (!is_final) {
                    protocol::reply down;
                    failure = forward_sync(req, down);
                    ack.stats = down.stats;
                }
                stage_->truncate_lane(lane, req.kind == message_kind::stop ? 0 : req.pos_start);
                if (req.kind == message_kind::stop) token_sampler.reset();
                break;
            }
            default:
                failure = make_error(error_code::unsupported, me + " does not handle " +
                                                                 std::string(protocol::message_kind_name(req.kind)) + " requests");
                break;
        }
        if (!failure.is_ok()) break;
        failure = upstream.send_reply(ack);
        if (!failure.is_ok()) break;
    }

    {
        std::lock_guard<std::mutex> lock(slot.mutex);
        if (!failure.is_ok() && !stopping_.load()) {
            SKIPPY_LOG_WARN("%s: lane %d closed: %s", me.c_str(), lane, failure.to_string().c_str());
            upstream.fail(failed_request, failure.with_context(me));
            // Stage 0 may be waiting on the return link: tell it the reason there too.
            if (is_final) downstream.fail(failed_request, failure.with_context(me));
        }
        slot.upstream = nullptr;
        slot.downstream = nullptr;
        upstream.close();
        downstream.close();
    }
    stage_->truncate_lane(lane, 0);
}

}  // namespace skippy::transport
