#include "transport/chain.h"

#include "base/log.h"
#include "transport/convert.h"

namespace skippy::transport {

using protocol::message_kind;

chain_pipeline::chain_pipeline(std::unique_ptr<stage> stage0, topology topo, tcp_listener return_listener,
                               const chain_options & options)
    : stage_(std::move(stage0)), topo_(std::move(topo)), listener_(std::move(return_listener)), options_(options) {
    for (int32_t i = 0; i < stage_->n_lanes(); ++i) lanes_.push_back(std::make_unique<lane_state>());
    acceptor_ = std::thread([this] { accept_loop(); });
}

chain_pipeline::~chain_pipeline() {
    stopping_.store(true);
    if (acceptor_.joinable()) acceptor_.join();
    listener_.close();
    for (auto & ls : lanes_) ls->forward.close();
    servers_.clear();  // stops the in-process stages
}

// Registers return links: the final stage dials stage 0 once per lane.
void chain_pipeline::accept_loop() {
    const int32_t final_stage = topo_.n_stages() - 1;
    while (!stopping_.load()) {
        auto accepted = listener_.accept(std::chrono::milliseconds(100));
        if (!accepted.is_ok()) continue;
        tcp_socket socket = std::move(accepted).value();
        auto hello = answer_hello(socket, options_.link, [&](const protocol::hello & h) -> status {
            if (h.link != protocol::link_kind::direct_return) {
                return make_error(error_code::invalid_argument, "stage 0 takes return links only");
            }
            if (h.lane >= static_cast<uint32_t>(lanes_.size())) return make_error(error_code::invalid_argument, "no such lane");
            if (h.sender_stage != static_cast<uint32_t>(final_stage)) {
                return make_error(error_code::invalid_argument, "only the final stage (" + std::to_string(final_stage) + ") returns tokens");
            }
            return status::ok();
        });
        if (!hello.is_ok()) {
            SKIPPY_LOG_WARN("stage 0: refused a return link: %s", hello.error().to_string().c_str());
            continue;
        }
        auto link = std::make_unique<stage_link>(std::move(socket), options_.link, "stage " + std::to_string(final_stage) + " (return)");
        auto open = link->read_request(clock::now() + options_.link.handshake_timeout);
        if (!open.is_ok() || open->kind != message_kind::prediction_return_open || open->session_id != hello->lane) {
            SKIPPY_LOG_WARN("stage 0: return link for lane %u did not open properly", hello->lane);
            continue;
        }
        lane_state & ls = *lanes_[hello->lane];
        {
            std::lock_guard<std::mutex> lock(ls.return_mutex);
            ls.return_link = std::move(link);
        }
        ls.return_ready.notify_all();
    }
}

status chain_pipeline::fail_lane(int32_t lane, const status & st) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    ls.broken = true;
    ls.forward.close();
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ls.return_link.reset();
    }
    stage_->truncate_lane(lane, 0);
    SKIPPY_LOG_WARN("stage 0: lane %d failed: %s", lane, st.to_string().c_str());
    return st;
}

status chain_pipeline::ensure_connected(int32_t lane) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!ls.broken && ls.forward.connected()) return status::ok();
    ls.forward.close();
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ls.return_link.reset();  // the final stage dials a fresh one on ConfigureGeneration
    }
    protocol::hello h;
    h.link = protocol::link_kind::forward;
    h.lane = static_cast<uint32_t>(lane);
    h.sender_stage = 0;
    const auto & ep = topo_.stages[1].address;
    SKIPPY_ASSIGN_OR_RETURN(ls.forward, connect_link(ep, h, options_.link, "stage 1 (" + ep.to_string() + ")"));
    ls.outstanding = 0;
    ls.broken = false;
    return status::ok();
}

protocol::request chain_pipeline::make_request(lane_state & ls, message_kind kind, int64_t pos_start) const {
    protocol::request r;
    r.kind = kind;
    r.request_id = ls.next_request_id++;
    r.pos_start = pos_start;
    r.state.prompt_token_count = static_cast<uint32_t>(ls.prompt_tokens);
    r.state.decode_step = static_cast<uint32_t>(ls.decode_step);
    r.state.source_stage = 0;
    switch (kind) {
        case message_kind::prefill:
        case message_kind::prefill_final: r.state.phase = protocol::message_phase::prefill; break;
        case message_kind::decode: r.state.phase = protocol::message_phase::decode; break;
        default: r.state.phase = protocol::message_phase::control; break;
    }
    return r;
}

// Reads one reply from stage 1: an ack of a streamed request returns credit; the reply
// to `want_id` (if any) goes to *out.
status chain_pipeline::read_forward_reply(lane_state & ls, uint64_t want_id, protocol::reply * out) {
    SKIPPY_ASSIGN_OR_RETURN(protocol::reply r, ls.forward.read_reply(ls.forward.reply_deadline()));
    if (r.kind == message_kind::error) return protocol::error_reply_status(r);
    if (out && r.request_id == want_id) {
        *out = std::move(r);
        return status::ok();
    }
    if (r.kind != message_kind::ack || ls.outstanding <= 0) {
        return make_error(error_code::invalid_data, "stage 1 sent an unexpected " + std::string(protocol::message_kind_name(r.kind)));
    }
    --ls.outstanding;
    return status::ok();
}

// The return link closed: a stage that failed closed its links and sent its reason
// upstream, hop by hop. Prefer that reason when it arrives shortly.
status chain_pipeline::upstream_reason(lane_state & ls, const status & fallback) {
    const auto deadline = clock::now() + std::chrono::seconds(2);
    while (ls.forward.connected()) {
        auto r = ls.forward.read_reply(deadline);
        if (!r.is_ok()) return fallback;
        if (r->kind == message_kind::error) return protocol::error_reply_status(*r);
    }
    return fallback;
}

status chain_pipeline::roundtrip(int32_t lane, protocol::request req, protocol::reply & reply) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    req.session_id = static_cast<uint64_t>(lane);
    while (ls.outstanding > 0) SKIPPY_TRY(read_forward_reply(ls, 0, nullptr));
    SKIPPY_TRY(ls.forward.send_request(req));
    return read_forward_reply(ls, req.request_id, &reply);
}

status chain_pipeline::send_streamed(int32_t lane, protocol::request req) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    req.session_id = static_cast<uint64_t>(lane);
    while (ls.outstanding >= options_.credit_window) SKIPPY_TRY(read_forward_reply(ls, 0, nullptr));
    SKIPPY_TRY(ls.forward.send_request(req));
    ++ls.outstanding;
    return status::ok();
}

status chain_pipeline::begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                             std::string_view cache_key) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    SKIPPY_TRY(sampling.validate());
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    stage_->truncate_lane(lane, 0);
    status st = ensure_connected(lane);
    if (!st.is_ok()) return fail_lane(lane, st);
    ls.prompt_tokens = static_cast<int32_t>(prompt_tokens.size());
    ls.decode_step = 0;
    ls.last_stats = {};
    protocol::request req = make_request(ls, message_kind::configure_generation, 0);
    protocol::generation_config gc;
    gc.sampling = to_sampling_params(sampling);
    gc.cache_key = std::string(cache_key);
    req.generation = gc;
    protocol::reply reply;
    st = roundtrip(lane, std::move(req), reply);
    if (!st.is_ok()) return fail_lane(lane, st);
    // The final stage opened the return link before acking; the acceptor may still be
    // registering it.
    std::unique_lock<std::mutex> lock(ls.return_mutex);
    if (!ls.return_ready.wait_for(lock, options_.link.handshake_timeout, [&] { return ls.return_link != nullptr; })) {
        lock.unlock();
        return fail_lane(lane, make_error(error_code::unavailable, "the final stage did not open its return link to stage 0"));
    }
    return status::ok();
}

status chain_pipeline::prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int32_t n_embd = stage_->hparams().n_embd;
    ls.hidden.resize(static_cast<size_t>(n * n_embd));
    const auto t0 = clock::now();
    SKIPPY_TRY(stage_->forward(lane, pos_start, tokens, {}, n, ls.hidden));
    protocol::request req = make_request(ls, message_kind::prefill, pos_start);
    req.tokens.assign(tokens.begin(), tokens.end());
    req.stats.max_compute_us = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
    protocol::activation_frame frame;
    frame.producer_stage = 0;
    frame.layer_start = static_cast<uint32_t>(stage_->slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_->slice().range().end);
    frame.n_embd = static_cast<uint32_t>(n_embd);
    frame.values = ls.hidden;
    req.activation = std::move(frame);
    status st = send_streamed(lane, std::move(req));
    return st.is_ok() ? st : fail_lane(lane, st);
}

result<token_id> chain_pipeline::decode(int32_t lane, int64_t pos, token_id token) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    const int32_t n_embd = stage_->hparams().n_embd;
    ls.hidden.resize(static_cast<size_t>(n_embd));
    const auto t0 = clock::now();
    SKIPPY_TRY(stage_->forward(lane, pos, std::span<const token_id>(&token, 1), {}, 1, ls.hidden));
    protocol::request req = make_request(ls, message_kind::decode, pos);
    req.state.current_token = token;
    req.tokens = {token};
    req.stats.max_compute_us = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
    protocol::activation_frame frame;
    frame.layer_start = static_cast<uint32_t>(stage_->slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_->slice().range().end);
    frame.n_embd = static_cast<uint32_t>(n_embd);
    frame.values = ls.hidden;
    req.activation = std::move(frame);
    const uint64_t id = req.request_id;
    status st = send_streamed(lane, std::move(req));
    if (!st.is_ok()) return fail_lane(lane, st);

    stage_link * ret = nullptr;
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ret = ls.return_link.get();
    }
    if (!ret) return fail_lane(lane, make_error(error_code::unavailable, "no return link from the final stage"));
    // Wait for the token on the return link while taking acks (and errors) from stage 1.
    const auto deadline = clock::now() + options_.link.reply_timeout;
    while (true) {
        const int fds[2] = {ret->fd(), ls.forward.fd()};
        const int ready = wait_readable(fds, deadline);
        if (ready < 0) return fail_lane(lane, make_error(error_code::unavailable, "timed out waiting for the predicted token"));
        if (ready == 1) {
            st = read_forward_reply(ls, 0, nullptr);
            if (!st.is_ok()) return fail_lane(lane, st);
            continue;
        }
        auto r = ret->read_reply(deadline);
        if (!r.is_ok()) return fail_lane(lane, upstream_reason(ls, r.error()));
        if (r->kind == message_kind::error) return fail_lane(lane, protocol::error_reply_status(*r));
        if (r->kind != message_kind::predicted_token || r->request_id != id) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned an unexpected " +
                                                                            std::string(protocol::message_kind_name(r->kind))));
        }
        if (r->token < 0 || r->token >= n_vocab()) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned token " + std::to_string(r->token) +
                                                                            ", outside the vocabulary"));
        }
        ls.last_stats = r->stats;
        ++ls.decode_step;
        return static_cast<token_id>(r->token);
    }
}

void chain_pipeline::end(int32_t lane) {
    if (lane < 0 || lane >= n_lanes()) return;
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    stage_->truncate_lane(lane, 0);
    if (ls.broken) return;
    protocol::reply reply;
    status st = roundtrip(lane, make_request(ls, message_kind::stop, 0), reply);
    if (!st.is_ok()) (void)fail_lane(lane, st);
}

protocol::stats_block chain_pipeline::last_stats(int32_t lane) const { return lanes_[static_cast<size_t>(lane)]->last_stats; }

namespace {

result<std::unique_ptr<stage>> load_stage(std::shared_ptr<const gguf::file> file, layer_range layers, const stage_options & options) {
    stage_options so = options;
    so.layers = layers;
    return stage::load(std::move(file), so);
}

}  // namespace

result<std::unique_ptr<pipeline_i>> make_embedded_chain(std::shared_ptr<const gguf::file> file, int32_t n_stages,
                                                        const stage_options & options, const chain_options & chain) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    SKIPPY_ASSIGN_OR_RETURN(topology topo, even_split(file->path(), hp.n_layer, n_stages, "127.0.0.1", 0));
    if (n_stages == 1) {
        SKIPPY_ASSIGN_OR_RETURN(auto whole, load_stage(file, topo.stages[0].layers, options));
        return std::unique_ptr<pipeline_i>(std::make_unique<local_pipeline>(std::move(whole)));
    }
    // Bind every stage on an ephemeral loopback port first, then tell each the others'.
    std::vector<tcp_listener> listeners;
    for (auto & s : topo.stages) {
        s.address.port = 0;  // the kernel picks a free port
        SKIPPY_ASSIGN_OR_RETURN(tcp_listener l, tcp_listener::listen(s.address));
        s.address.port = l.port();
        listeners.push_back(std::move(l));
    }
    std::vector<std::unique_ptr<stage_server>> servers;
    for (int32_t i = 1; i < n_stages; ++i) {
        SKIPPY_ASSIGN_OR_RETURN(auto st, load_stage(file, topo.stages[static_cast<size_t>(i)].layers, options));
        servers.push_back(std::make_unique<stage_server>(std::move(st), i, topo, std::move(listeners[static_cast<size_t>(i)]), chain));
        servers.back()->start();
    }
    SKIPPY_ASSIGN_OR_RETURN(auto stage0, load_stage(file, topo.stages[0].layers, options));
    auto pipeline = std::make_unique<chain_pipeline>(std::move(stage0), topo, std::move(listeners[0]), chain);
    pipeline->own_servers(std::move(servers));
    return std::unique_ptr<pipeline_i>(std::move(pipeline));
}

result<std::unique_ptr<pipeline_i>> make_topology_chain(std::shared_ptr<const gguf::file> file, const topology & topo,
                                                        const stage_options & options, const chain_options & chain) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    SKIPPY_TRY(topo.validate(hp.n_layer));
    SKIPPY_ASSIGN_OR_RETURN(auto stage0, load_stage(file, topo.stages[0].layers, options));
    if (topo.n_stages() == 1) return std::unique_ptr<pipeline_i>(std::make_unique<local_pipeline>(std::move(stage0)));
    SKIPPY_ASSIGN_OR_RETURN(tcp_listener l, tcp_listener::listen(topo.stages[0].address));
    return std::unique_ptr<pipeline_i>(std::make_unique<chain_pipeline>(std::move(stage0), topo, std::move(l), chain));
}

}  // namespace skippy::transport
