#include "transport/chain.h"

#include "base/log.h"
#include "runtime/sampler.h"
#include "transport/convert.h"

namespace skippy::transport {

using protocol::message_kind;

struct chain_pipeline::lane_state {
    explicit lane_state(stage_cache_host * host, int32_t lane) : cache(host, lane) {}

    stage_link               forward;
    int32_t                  outstanding = 0;
    uint64_t                 next_request_id = 1;
    bool                     broken = true;  // (re)connect on the next begin()
    std::vector<float>       hidden;
    protocol::stats_block    stats;          // merged over the current request
    int32_t                  decode_step = 0;
    std::vector<token_id>    prompt;
    int64_t                  restored = 0;       // prompt positions restored from the cache
    bool                     restore_on_decode = false;  // TryRestorePrefillDecode pending
    lane_cache               cache;
    // Single-stage chains sample here.
    std::unique_ptr<sampler> token_sampler;
    std::vector<token_id>    sequence;
    std::vector<float>       logits;
    // Set by the acceptor thread, taken by the lane's user.
    std::mutex                  return_mutex;
    std::condition_variable     return_ready;
    std::unique_ptr<stage_link> return_link;
};

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

constexpr int32_t k_fallback_chunk_tokens = 512;

}  // namespace

chain_pipeline::chain_pipeline(std::unique_ptr<stage> stage0, std::unique_ptr<stage_cache_host> cache, topology topo,
                               tcp_listener return_listener, const chain_options & options)
    : stage_(std::move(stage0)), cache_(std::move(cache)), topo_(std::move(topo)), listener_(std::move(return_listener)),
      options_(options), handshakes_(options.link.max_pending_handshakes) {
    for (int32_t i = 0; i < stage_->n_lanes(); ++i) lanes_.push_back(std::make_unique<lane_state>(cache_.get(), i));
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
    ls.cache.reset();
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
    r.state.prompt_token_count = static_cast<uint32_t>(ls.prompt.size());
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

protocol::activation_frame chain_pipeline::output_frame(const std::vector<float> & hidden) const {
    protocol::activation_frame frame;
    frame.producer_stage = 0;
    frame.layer_start = static_cast<uint32_t>(stage_->slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_->slice().range().end);
    frame.n_embd = static_cast<uint32_t>(stage_->hparams().n_embd);
    frame.values = hidden;
    return frame;
}

// One reply from stage 1: an ack of a streamed request returns credit; the reply to
// `want_id` (if any) goes to *out.
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
// upstream, hop by hop. Prefer that reason when it arrives shortly. When the forward
// link closes too without a reason, stage 1 itself is gone: a dead stage sends
// nothing, and the final stage only saw its own upstream close, so blaming the return
// link would name the wrong stage. Only a forward link that stays open (stage 1
// alive, no reason within 2 s) leaves the return link's failure as the answer.
status chain_pipeline::upstream_reason(lane_state & ls, const status & fallback) {
    const auto deadline = clock::now() + std::chrono::seconds(2);
    while (ls.forward.connected()) {
        auto r = ls.forward.read_reply(deadline);
        if (!r.is_ok()) {
            if (r.error().message().find("timed out") != std::string::npos) return fallback;
            return r.error();  // the nearest failed stage: stage 1
        }
        if (r->kind == message_kind::error) return protocol::error_reply_status(*r);
    }
    return fallback;
}

status chain_pipeline::roundtrip(int32_t lane, protocol::request req, protocol::reply & reply) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    req.session_id = static_cast<uint64_t>(lane);
    const auto t0 = clock::now();
    while (ls.outstanding > 0) SKIPPY_TRY(read_forward_reply(ls, 0, nullptr));
    SKIPPY_TRY(ls.forward.send_request(req));
    ls.stats.max_forward_us = std::max(ls.stats.max_forward_us, measured_us_since(t0));
    SKIPPY_TRY(read_forward_reply(ls, req.request_id, &reply));
    ls.stats = protocol::merge_stats(ls.stats, reply.stats);
    return status::ok();
}

status chain_pipeline::send_streamed(int32_t lane, protocol::request req) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    req.session_id = static_cast<uint64_t>(lane);
    const auto t0 = clock::now();
    while (ls.outstanding >= options_.credit_window) SKIPPY_TRY(read_forward_reply(ls, 0, nullptr));
    SKIPPY_TRY(ls.forward.send_request(req));
    ls.stats.max_forward_us = std::max(ls.stats.max_forward_us, measured_us_since(t0));
    ++ls.outstanding;
    return status::ok();
}

status chain_pipeline::begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                             std::string_view cache_key) {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    SKIPPY_TRY(sampling.validate(n_vocab()));
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    stage_->truncate_lane(lane, 0);
    ls.prompt.assign(prompt_tokens.begin(), prompt_tokens.end());
    ls.decode_step = 0;
    ls.stats = {};
    ls.restored = 0;
    ls.restore_on_decode = false;
    const cache::cache_mode mode = options_.cache.config.mode;
    ls.cache.configure(std::string(cache_key), mode, static_cast<int64_t>(ls.prompt.size()));
    // The last prompt token always runs through decode: at most n - 1 are restorable.
    const int64_t restorable_max = static_cast<int64_t>(ls.prompt.size()) - 1;

    if (single_stage()) {
        ls.token_sampler = std::make_unique<sampler>(sampling);
        ls.sequence.clear();
        if (ls.cache.lookups() && restorable_max >= ls.cache.min_tokens()) {
            const auto r = ls.cache.restore(std::span<const token_id>(ls.prompt).first(static_cast<size_t>(restorable_max)),
                                            restorable_max, cache::lookup_kind::restore, true);
            add_cache_counters(ls.stats, r.counters);
            ls.restored = r.restored_tokens;
            ls.sequence.assign(ls.prompt.begin(), ls.prompt.begin() + ls.restored);
        }
        return status::ok();
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
    st = roundtrip(lane, std::move(req), reply);
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
    if (ls.cache.lookups() && restorable_max >= ls.cache.min_tokens()) {
        st = restore_chain(lane);
        if (!st.is_ok()) return fail_lane(lane, st);
    }
    return status::ok();
}

// Finds the longest prefix every stage can restore and restores it everywhere, or
// nowhere. A full-prompt hit is left for the first decode (TryRestorePrefillDecode).
status chain_pipeline::restore_chain(int32_t lane) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    const std::span<const token_id> query = std::span<const token_id>(ls.prompt).first(ls.prompt.size() - 1);
    const int64_t local = ls.cache.probe(query);
    if (local < ls.cache.min_tokens()) return status::ok();
    protocol::request probe = make_request(ls, message_kind::probe_prefill, 0);
    probe.tokens.assign(query.begin(), query.begin() + local);
    protocol::reply reply;
    SKIPPY_TRY(roundtrip(lane, std::move(probe), reply));
    const int64_t chain = std::min(local, reply.restored_tokens);
    if (chain < ls.cache.min_tokens()) return status::ok();
    if (chain == static_cast<int64_t>(query.size())) {
        ls.restored = chain;
        ls.restore_on_decode = true;
        return status::ok();
    }
    return restore_prefix(lane, chain);
}

// Restores the first `chain` prompt tokens on every stage (TryRestorePrefill down the
// chain, then here), or leaves every stage as it was.
status chain_pipeline::restore_prefix(int32_t lane, int64_t chain) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    const std::span<const token_id> query = std::span<const token_id>(ls.prompt).first(static_cast<size_t>(chain));
    protocol::reply reply;
    protocol::request restore = make_request(ls, message_kind::try_restore_prefill, 0);
    restore.tokens.assign(query.begin(), query.end());
    SKIPPY_TRY(roundtrip(lane, std::move(restore), reply));
    if (reply.outcome != protocol::ack_outcome::hit) return status::ok();  // everyone below rolled back
    const auto r = ls.cache.restore(query, chain, cache::lookup_kind::try_restore, false);
    add_cache_counters(ls.stats, r.counters);
    if (r.outcome == cache::lookup_outcome::hit && r.restored_tokens == chain) {
        ls.restored = chain;
        return status::ok();
    }
    // Our own entry went away between probe and restore: undo the stages below.
    protocol::request trim = make_request(ls, message_kind::trim_session, 0);
    return roundtrip(lane, std::move(trim), reply);
}

status chain_pipeline::settle_restore(int32_t lane) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!ls.restore_on_decode) return status::ok();
    ls.restore_on_decode = false;
    const int64_t chain = ls.restored;
    ls.restored = 0;
    const status st = restore_prefix(lane, chain);
    return st.is_ok() ? st : fail_lane(lane, st);
}

status chain_pipeline::prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (!single_stage() && ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int32_t n_embd = stage_->hparams().n_embd;
    const auto t0 = clock::now();
    cache::cache_counters counters;
    // In-band on a chunk at position 0 (nothing was restored): skip it when its frame
    // and KV are both cached.
    const bool from_cache = !single_stage() && pos_start == 0 && ls.cache.restore_chunk_with_activation(tokens, n_embd, ls.hidden, counters);
    if (!from_cache) {
        ls.hidden.resize(static_cast<size_t>(n * n_embd));
        status st = stage_->forward(lane, pos_start, tokens, {}, n, ls.hidden);
        if (!st.is_ok()) return single_stage() ? st : fail_lane(lane, st);
        ls.cache.note_prefill(pos_start, tokens);
        if (!single_stage() && pos_start == 0) ls.cache.record_activation(tokens, n_embd, ls.hidden);
    }
    counters.merge(ls.cache.record_if_final(pos_start + n, false));
    add_cache_counters(ls.stats, counters);
    if (single_stage()) {
        ls.sequence.resize(static_cast<size_t>(pos_start));
        ls.sequence.insert(ls.sequence.end(), tokens.begin(), tokens.end());
        return status::ok();
    }
    protocol::request req = make_request(ls, message_kind::prefill, pos_start);
    req.tokens.assign(tokens.begin(), tokens.end());
    // This stage's counters are already in ls.stats; the final stage's reply carries
    // the merge of the stages below, so sending them down would count them twice.
    req.stats.max_compute_us = micros_since(t0);
    req.activation = output_frame(ls.hidden);
    status st = send_streamed(lane, std::move(req));
    return st.is_ok() ? st : fail_lane(lane, st);
}

result<token_id> chain_pipeline::sample_local(int32_t lane, int64_t pos) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    ls.logits.resize(static_cast<size_t>(stage_->hparams().n_vocab));
    stage_->logits(ls.hidden, 1, ls.logits);
    ls.sequence.resize(static_cast<size_t>(pos + 1));
    ls.token_sampler->set_history(ls.sequence);
    return ls.token_sampler->sample_finite(ls.logits);
}

result<token_id> chain_pipeline::decode(int32_t lane, int64_t pos, token_id token) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    if (single_stage()) {
        if (!ls.token_sampler) return make_error(error_code::internal, "decode before begin");
        ls.hidden.resize(static_cast<size_t>(stage_->hparams().n_embd));
        SKIPPY_TRY(stage_->forward(lane, pos, std::span<const token_id>(&token, 1), {}, 1, ls.hidden));
        ls.sequence.resize(static_cast<size_t>(pos));
        ls.sequence.push_back(token);
        ++ls.decode_step;
        return sample_local(lane, pos);
    }
    if (ls.broken) return make_error(error_code::unavailable, "lane " + std::to_string(lane) + " is not connected");
    if (ls.restore_on_decode) return decode_with_restore(lane, pos, token);
    const int32_t n_embd = stage_->hparams().n_embd;
    ls.hidden.resize(static_cast<size_t>(n_embd));
    const auto t0 = clock::now();
    status st = stage_->forward(lane, pos, std::span<const token_id>(&token, 1), {}, 1, ls.hidden);
    if (!st.is_ok()) return fail_lane(lane, st);
    protocol::request req = make_request(ls, message_kind::decode, pos);
    req.state.current_token = token;
    req.tokens = {token};
    req.stats.max_compute_us = micros_since(t0);
    req.activation = output_frame(ls.hidden);
    const uint64_t id = req.request_id;
    st = send_streamed(lane, std::move(req));
    if (!st.is_ok()) return fail_lane(lane, st);
    return wait_for_token(lane, id);
}

// The first decode of a prompt whose first n - 1 tokens every stage holds: restore
// them and decode the last prompt token in one trip. A miss anywhere (an entry evicted
// since the probe) rolls the chain back and computes the prompt instead.
result<token_id> chain_pipeline::decode_with_restore(int32_t lane, int64_t pos, token_id token) {
    lane_state & ls = *lanes_[static_cast<size_t>(lane)];
    ls.restore_on_decode = false;
    const int64_t n = ls.restored;
    const std::span<const token_id> prefix = std::span<const token_id>(ls.prompt).first(static_cast<size_t>(n));
    const auto r = ls.cache.restore(prefix, n, cache::lookup_kind::try_restore_decode, false);
    add_cache_counters(ls.stats, r.counters);
    if (r.outcome == cache::lookup_outcome::hit && r.restored_tokens == n && pos == n) {
        const int32_t n_embd = stage_->hparams().n_embd;
        ls.hidden.resize(static_cast<size_t>(n_embd));
        status st = stage_->forward(lane, pos, std::span<const token_id>(&token, 1), {}, 1, ls.hidden);
        if (!st.is_ok()) return fail_lane(lane, st);
        protocol::request req = make_request(ls, message_kind::try_restore_prefill_decode, 0);
        req.tokens.assign(prefix.begin(), prefix.end());
        req.state.current_token = token;
        req.activation = output_frame(ls.hidden);
        protocol::reply reply;
        st = roundtrip(lane, std::move(req), reply);
        if (!st.is_ok()) return fail_lane(lane, st);
        if (reply.kind == message_kind::predicted_token) {
            if (reply.token < 0 || reply.token >= n_vocab()) {
                return fail_lane(lane, make_error(error_code::invalid_data, "the final stage returned a token outside the vocabulary"));
            }
            ++ls.decode_step;
            return static_cast<token_id>(reply.token);
        }
    }
    // Fall back: compute the whole prompt from position 0 on every stage.
    ls.cache.rollback();
    stage_->truncate_lane(lane, 0);
    ls.restored = 0;
    for (int64_t p = 0; p < pos; p += k_fallback_chunk_tokens) {
        const int64_t m = std::min<int64_t>(k_fallback_chunk_tokens, pos - p);
        SKIPPY_TRY(prefill(lane, p, std::span<const token_id>(ls.prompt).subspan(static_cast<size_t>(p), static_cast<size_t>(m))));
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
            status st = read_forward_reply(ls, 0, nullptr);
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
    add_cache_counters(ls.stats, ls.cache.stop());
    stage_->truncate_lane(lane, 0);
    ls.token_sampler.reset();
    if (single_stage() || ls.broken) return;
    protocol::reply reply;
    status st = roundtrip(lane, make_request(ls, message_kind::stop, 0), reply);
    if (!st.is_ok()) (void)fail_lane(lane, st);
}

int64_t chain_pipeline::cached_tokens(int32_t lane) const { return lanes_[static_cast<size_t>(lane)]->restored; }

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
