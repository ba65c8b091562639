#include "transport/chain.h"

#include "base/log.h"
#include "transport/chain_restore.h"
#include "transport/convert.h"
#include "transport/downstream.h"
#include "transport/lane_session.h"
#include "transport/timing.h"

namespace skippy::transport {

using protocol::message_kind;

struct chain_pipeline::lane_state final : chain_restore::chain_i {
    lane_state(chain_pipeline & owner, stage & st, stage_cache_host * host, int32_t lane, downstream_link::dial_fn dial)
        : self(owner), index(lane), session(st, host, lane, 0), forward(std::move(dial), owner.options_.credit_window),
          restore(session, *this, owner.single_stage()) {}

    // chain_restore::chain_i
    protocol::request make_request(message_kind kind, int64_t pos_start) override { return self.make_request(*this, kind, pos_start); }
    status roundtrip(protocol::request req, protocol::reply & reply) override { return self.roundtrip(*this, std::move(req), reply); }
    void add_counters(const cache::cache_counters & c) override { add_cache_counters(stats, c); }

    chain_pipeline &         self;
    const int32_t            index;
    lane_session             session;
    downstream_link          forward;  // to stage 1
    chain_restore            restore;
    uint64_t                 next_request_id = 1;
    bool                     broken = true;  // (re)connect on the next begin()
    protocol::stats_block    stats;          // merged over the current request
    int32_t                  decode_step = 0;
    int64_t                  n_prompt = 0;
    // Set by the acceptor thread, taken by the lane's user.
    std::mutex                  return_mutex;
    std::condition_variable     return_ready;
    std::unique_ptr<stage_link> return_link;
};

namespace {

constexpr int32_t k_fallback_chunk_tokens = 512;

}  // namespace

chain_pipeline::chain_pipeline(std::unique_ptr<stage> stage0, std::unique_ptr<stage_cache_host> cache, topology topo,
                               tcp_listener return_listener, const chain_options & options)
    : stage_(std::move(stage0)), cache_(std::move(cache)), topo_(std::move(topo)), listener_(std::move(return_listener)),
      options_(options), handshakes_(options.link.max_pending_handshakes) {
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
    if (!single_stage()) acceptor_ = std::thread([this] { accept_loop(); });
}

chain_pipeline::~chain_pipeline() {
    stopping_.store(true);
    if (acceptor_.joinable()) acceptor_.join();
    listener_.close();
    handshakes_.stop();
    for (auto & ls : lanes_) ls->forward.close();
    servers_.clear();  // stops the in-process stages
}

// Registers return links: the final stage dials stage 0 once per lane. Each
// handshake (hello, then PredictionReturnOpen) runs on a handshake thread, so a
// silent dialer cannot hold up the next one.
void chain_pipeline::accept_loop() {
    while (!stopping_.load()) {
        auto accepted = listener_.accept(std::chrono::milliseconds(100));
        if (!accepted.is_ok()) continue;
        if (!handshakes_.start(std::move(accepted).value(), [this](handshake_pool::pending & p) { register_return_link(p); })) {
            SKIPPY_LOG_WARN("stage 0: closed a connection: %d handshakes already pending", options_.link.max_pending_handshakes);
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
    auto open = read_first_request(p.socket(), options_.link, clock::now() + options_.link.handshake_timeout);
    if (!open.is_ok() || open->kind != message_kind::prediction_return_open || open->session_id != hello->lane) {
        SKIPPY_LOG_WARN("stage 0: return link for lane %u did not open properly%s", hello->lane,
                        open.is_ok() ? "" : (": " + open.error().to_string()).c_str());
        return;
    }
    auto link = std::make_unique<stage_link>(p.take(), options_.link, "stage " + std::to_string(final_stage) + " (return)");
    lane_state & ls = *lanes_[hello->lane];
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ls.return_link = std::move(link);
    }
    ls.return_ready.notify_all();
}

status chain_pipeline::fail_lane(int32_t lane, const status & st) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    ls.broken = true;
    ls.forward.close();
    {
        std::lock_guard<std::mutex> lock(ls.return_mutex);
        ls.return_link.reset();
    }
    ls.session.cache().reset();
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
            if (r.error().message().find("timed out") != std::string::npos) return fallback;
            return r.error();  // the nearest failed stage: stage 1
        }
        if (r->kind == message_kind::error) return protocol::error_reply_status(*r);
    }
    return fallback;
}

status chain_pipeline::roundtrip(lane_state & ls, protocol::request req, protocol::reply & reply) {
    uint32_t forward_us = 0;
    SKIPPY_TRY(ls.forward.roundtrip(req, reply, &forward_us));
    ls.stats.max_forward_us = std::max(ls.stats.max_forward_us, forward_us);
    ls.stats = protocol::merge_stats(ls.stats, reply.stats);
    return status::ok();
}

status chain_pipeline::send_streamed(lane_state & ls, protocol::request req) {
    uint32_t forward_us = 0;
    SKIPPY_TRY(ls.forward.send_streamed(req, &forward_us));
    ls.stats.max_forward_us = std::max(ls.stats.max_forward_us, forward_us);
    return status::ok();
}

status chain_pipeline::begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                             std::string_view cache_key) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    SKIPPY_TRY(sampling.validate());
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    stage_->truncate_lane(lane, 0);
    ls.n_prompt = static_cast<int64_t>(prompt_tokens.size());
    ls.decode_step = 0;
    ls.stats = {};
    ls.restore.reset();
    const cache::cache_mode mode = options_.cache.config.mode;
    ls.session.cache().configure(std::string(cache_key), mode, ls.n_prompt);

    if (single_stage()) {
        ls.session.start_sampling(sampling);
        return ls.restore.begin(prompt_tokens);
    }

    status st = ensure_connected(lane);
    if (!st.is_ok()) return fail_lane(lane, st);
    protocol::request req = make_request(ls, message_kind::configure_generation, 0);
    protocol::generation_config gc;
    gc.sampling = to_sampling_params(sampling);
    gc.cache_key = std::string(cache_key);
    gc.cache_mode = to_prompt_cache_mode(mode);
    gc.cache_min_tokens = static_cast<uint32_t>(std::max<int64_t>(0, options_.cache.config.min_tokens));
    req.generation = gc;
    protocol::reply reply;
    st = roundtrip(ls, std::move(req), reply);
    if (!st.is_ok()) return fail_lane(lane, st);
    {
        // The final stage opened the return link before acking; the acceptor may still
        // be registering it.
        std::unique_lock<std::mutex> lock(ls.return_mutex);
        if (!ls.return_ready.wait_for(lock, options_.link.handshake_timeout, [&] { return ls.return_link != nullptr; })) {
            lock.unlock();
            return fail_lane(lane, make_error(error_code::unavailable, "the final stage did not open its return link to stage 0"));
        }
    }
    st = ls.restore.begin(prompt_tokens);
    return st.is_ok() ? st : fail_lane(lane, st);
}

status chain_pipeline::prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool decodes) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!decodes) {
        const status st = ls.restore.settle();
        if (!st.is_ok()) return fail_lane(lane, st);
    }
    return pipeline_i::prefill_prompt(lane, prompt, chunk_tokens, decodes);
}

status chain_pipeline::prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!single_stage() && ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    const int64_t n = static_cast<int64_t>(tokens.size());
    const auto t0 = clock::now();
    cache::cache_counters counters;
    // In-band on a chunk at position 0 (nothing was restored): skip it when its frame
    // and KV are both cached.
    const bool from_cache = !single_stage() && ls.session.lookup_chunk(pos_start, tokens, false, counters).from_cache;
    if (!from_cache) {
        status st = ls.session.compute(pos_start, tokens, {});
        if (!st.is_ok()) return single_stage() ? st : fail_lane(lane, st);
        ls.session.note_computed(pos_start, tokens);
    }
    counters.merge(ls.session.cache().record_if_final(pos_start + n, false));
    add_cache_counters(ls.stats, counters);
    if (single_stage()) {
        ls.session.track_tokens(pos_start, tokens);
        return status::ok();
    }
    protocol::request req = make_request(ls, message_kind::prefill, pos_start);
    req.tokens.assign(tokens.begin(), tokens.end());
    // This stage's counters are already in ls.stats; the final stage's reply carries
    // the merge of the stages below, so sending them down would count them twice.
    req.stats.max_compute_us = micros_since(t0);
    req.activation = ls.session.output_frame();
    status st = send_streamed(ls, std::move(req));
    return st.is_ok() ? st : fail_lane(lane, st);
}

result<token_id> chain_pipeline::decode(int32_t lane, int64_t pos, token_id token) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    const std::span<const token_id> one(&token, 1);
    if (single_stage()) {
        if (!ls.session.sampling()) return make_error(error_code::internal, "decode before begin");
        SKIPPY_TRY(ls.session.compute(pos, one, {}));
        ls.session.track_tokens(pos, one);
        ++ls.decode_step;
        return ls.session.sample_last_row();
    }
    if (ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    if (ls.restore.deferred()) return decode_with_restore(lane, pos, token);
    const auto t0 = clock::now();
    status st = ls.session.compute(pos, one, {});
    if (!st.is_ok()) return fail_lane(lane, st);
    protocol::request req = make_request(ls, message_kind::decode, pos);
    req.state.current_token = token;
    req.tokens = {token};
    req.stats.max_compute_us = micros_since(t0);
    req.activation = ls.session.output_frame();
    const uint64_t id = req.request_id;
    st = send_streamed(ls, std::move(req));
    if (!st.is_ok()) return fail_lane(lane, st);
    return wait_for_token(lane, id);
}

// The first decode of a prompt whose first n - 1 tokens every stage holds: restore
// them and decode the last prompt token in one trip. A miss anywhere (an entry evicted
// since the probe) rolls the chain back and computes the prompt instead.
result<token_id> chain_pipeline::decode_with_restore(int32_t lane, int64_t pos, token_id token) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    auto next = ls.restore.decode(pos, token, [&] { return ls.session.compute(pos, std::span<const token_id>(&token, 1), {}); });
    if (!next.is_ok()) return fail_lane(lane, next.error());
    if (next->has_value()) {
        const int32_t t = **next;
        if (t < 0 || t >= n_vocab()) {
            return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned a token outside the vocabulary"));
        }
        ++ls.decode_step;
        return static_cast<token_id>(t);
    }
    // Fall back: compute the whole prompt from position 0 on every stage.
    stage_->truncate_lane(lane, 0);
    const auto & prompt = ls.restore.prompt();
    for (int64_t p = 0; p < pos; p += k_fallback_chunk_tokens) {
        const int64_t m = std::min<int64_t>(k_fallback_chunk_tokens, pos - p);
        SKIPPY_TRY(prefill(lane, p, std::span<const token_id>(prompt).subspan(static_cast<size_t>(p), static_cast<size_t>(m))));
    }
    return decode(lane, pos, token);
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
    const auto deadline = clock::now() + options_.link.reply_timeout;
    while (true) {
        const int fds[2] = {ret->fd(), ls.forward.fd()};
        const int ready = wait_readable(fds, deadline);
        if (ready < 0) return fail_lane(lane, make_error(error_code::unavailable, "timed out waiting for the predicted token"));
        if (ready == 1) {
            status st = ls.forward.read_one(0, nullptr);
            if (!st.is_ok()) return fail_lane(lane, st);
            continue;
        }
        auto r = ret->read_reply(deadline);
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
        ls.stats = protocol::merge_stats(ls.stats, r->stats);
        ++ls.decode_step;
        return static_cast<token_id>(r->token);
    }
}

void chain_pipeline::end(int32_t lane) {
    if (lane < 0 || lane >= n_lanes()) return;
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    add_cache_counters(ls.stats, ls.session.cache().stop());
    stage_->truncate_lane(lane, 0);
    ls.session.stop_sampling();
    if (single_stage() || ls.broken) return;
    protocol::reply reply;
    status st = roundtrip(ls, make_request(ls, message_kind::stop, 0), reply);
    if (!st.is_ok()) (void)fail_lane(lane, st);
}

int64_t chain_pipeline::cached_tokens(int32_t lane) const { return lanes_[static_cast<size_t>(lane)]->restore.restored(); }

protocol::stats_block chain_pipeline::last_stats(int32_t lane) const { return lanes_[static_cast<size_t>(lane)]->stats; }

std::vector<telemetry::stage_snapshot> chain_pipeline::stage_snapshots() {
    std::vector<telemetry::stage_snapshot> out;
    out.push_back(stage_snapshot_of(0, *stage_, cache_.get()));
    for (const auto & s : servers_) out.push_back(stage_snapshot_of(s->stage_index(), s->model_stage(), s->cache_host()));
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
    return std::make_unique<chain_pipeline>(std::move(s0.st), std::move(s0.cache), topo, std::move(l), chain);
}

}  // namespace skippy::transport
