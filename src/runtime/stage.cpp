#include "runtime/stage.h"

#include "runtime/constraint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

namespace skippy {

int32_t physical_core_count() {
    std::set<std::pair<std::string, std::string>> cores;
    for (unsigned cpu = 0; cpu < 4096; ++cpu) {
        const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
        if (!core || !pkg) break;
        std::string c, p;
        core >> c;
        pkg >> p;
        cores.emplace(p, c);
    }
    if (!cores.empty()) return static_cast<int32_t>(cores.size());
    return std::max(1u, std::thread::hardware_concurrency());
}

result<std::unique_ptr<stage>> stage::load(std::shared_ptr<const gguf::file> file, const stage_options & options) {
    SKIPPY_ASSIGN_OR_RETURN(model_hparams hp, model_hparams::from_gguf(*file));
    layer_range range = options.layers;
    if (range.start == 0 && range.end == 0) range = {0, hp.n_layer};
    if (options.n_lanes < 1 || options.n_lanes > 1024) {
        return make_error(error_code::invalid_argument, "lanes must be in [1, 1024]");
    }
    if (options.kv_block_tokens < 1 || options.kv_block_tokens > 4096) {
        return make_error(error_code::invalid_argument, "KV block size must be in [1, 4096] tokens");
    }
    if (options.ctx_size < 0 || options.n_threads < 0 || options.n_threads > 1024) {
        return make_error(error_code::invalid_argument, "context size and thread count must be non-negative (threads <= 1024)");
    }
    auto s = std::unique_ptr<stage>(new stage());
    s->file_ = file;
    s->constraints_ = std::make_shared<constraint_cache>(file);
    s->ctx_size_ = options.ctx_size > 0 ? options.ctx_size : std::min(hp.n_ctx_train, 4096);
    SKIPPY_ASSIGN_OR_RETURN(s->slice_, model_slice::bind(file, range, {.n_ctx_seq = s->ctx_size_, .huge_pages = options.huge_pages}));
    const int32_t n_threads = options.n_threads > 0 ? options.n_threads : physical_core_count();
    s->pool_ = options.shared_pool ? options.shared_pool : std::make_shared<kernels::thread_pool>(n_threads);

    const int64_t blocks_per_lane = (s->ctx_size_ + options.kv_block_tokens - 1) / options.kv_block_tokens;
    const int64_t n_blocks = blocks_per_lane * options.n_lanes + options.kv_extra_blocks;
    s->kv_pool_ = std::make_unique<kv_pool>(s->slice_->kv_geometry_for(options.kv_type, options.kv_block_tokens), n_blocks);
    s->lanes_.resize(static_cast<size_t>(options.n_lanes));
    for (auto & lane : s->lanes_) {
        lane.kv = std::make_unique<kv_sequence>(*s->kv_pool_);
        lane.recurrent = s->slice_->make_recurrent_state();
    }
    return s;
}

status stage::check_lane(int32_t lane) const {
    if (lane < 0 || lane >= n_lanes()) {
        return make_error(error_code::invalid_argument, "lane " + std::to_string(lane) + " does not exist (" +
                                                            std::to_string(n_lanes()) + " lanes)");
    }
    return status::ok();
}

int64_t stage::lane_tokens(int32_t lane) const { return lanes_[static_cast<size_t>(lane)].kv->n_tokens(); }
kv_sequence & stage::lane_kv(int32_t lane) { return *lanes_[static_cast<size_t>(lane)].kv; }

status stage::check_span(const lane_span & span) const {
    SKIPPY_TRY(check_lane(span.lane));
    if (span.n_tokens <= 0) return make_error(error_code::invalid_argument, "forward needs at least one token");
    if (span.pos_start < 0 || span.pos_start + span.n_tokens > ctx_size_) {
        return make_error(error_code::invalid_argument, "positions [" + std::to_string(span.pos_start) + ", " +
                                                            std::to_string(span.pos_start + span.n_tokens) + ") exceed the context of " +
                                                            std::to_string(ctx_size_) + " tokens");
    }
    const int64_t held = lanes_[static_cast<size_t>(span.lane)].kv->n_tokens();
    if (span.pos_start > held) {
        return make_error(error_code::invalid_argument, "position " + std::to_string(span.pos_start) + " skips past the " +
                                                            std::to_string(held) + " tokens the lane holds");
    }
    // A recurrent state only continues from its own end (or restarts at 0): a lane whose
    // KV was cut back or restored underneath it cannot rebuild the state from the KV.
    const recurrent_state & rs = lanes_[static_cast<size_t>(span.lane)].recurrent;
    if (!rs.empty() && span.pos_start != 0 && rs.n_tokens() != span.pos_start) {
        const std::string held_state = rs.n_tokens() < 0 ? "is invalid (the lane was cut back)"
                                                         : "holds " + std::to_string(rs.n_tokens()) + " positions";
        return make_error(error_code::invalid_argument, "lane " + std::to_string(span.lane) + "'s recurrent state " + held_state +
                                                            ", cannot continue at " + std::to_string(span.pos_start) +
                                                            " (recurrent layers cannot be restored from KV)");
    }
    return status::ok();
}

status stage::forward(int32_t lane, int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in,
                      int64_t n_tokens, std::span<float> act_out) {
    const lane_span span{lane, pos_start, n_tokens};
    SKIPPY_TRY(check_span(span));
    const int64_t n_embd = hparams().n_embd;
    if (act_out.size() < static_cast<size_t>(n_tokens * n_embd)) {
        return make_error(error_code::internal, "forward output buffer too small");
    }
    float * x = act_out.data();
    if (is_first()) {
        if (tokens.size() != static_cast<size_t>(n_tokens)) return make_error(error_code::invalid_argument, "token count mismatch");
        SKIPPY_TRY(slice_->embed(tokens, x));
    } else {
        if (act_in.size() != static_cast<size_t>(n_tokens * n_embd)) {
            return make_error(error_code::invalid_argument, "activation frame holds " + std::to_string(act_in.size()) +
                                                                " floats, expected " + std::to_string(n_tokens * n_embd));
        }
        if (act_in.data() != x) std::memmove(x, act_in.data(), act_in.size() * sizeof(float));
    }
    status st;
    forward_batch(std::span<const lane_span>(&span, 1), x, std::span<status>(&st, 1));
    return st;
}

void stage::forward_batch(std::span<const lane_span> spans, float * x, std::span<status> span_status) {
    const int64_t n_embd = hparams().n_embd;
    std::lock_guard<std::mutex> lock(compute_mutex_);
    // Checks and KV room first, span by span, so that one lane's problem (a full
    // context, an exhausted pool) leaves the others to run.
    std::vector<lane_span> ready;
    ready.reserve(spans.size());
    bool all_ready = true;
    for (size_t i = 0; i < spans.size(); ++i) {
        const lane_span & s = spans[i];
        span_status[i] = check_span(s);
        if (span_status[i].is_ok()) {
            kv_sequence & kv = *lanes_[static_cast<size_t>(s.lane)].kv;
            const kv_write_fn write = [&] { return kv.prepare_write(s.pos_start, s.n_tokens); };
            span_status[i] = write_admission_ ? write_admission_(s.lane, s.pos_start, s.n_tokens, write) : write();
        }
        if (span_status[i].is_ok()) {
            ready.push_back(s);
        } else {
            all_ready = false;
        }
    }
    if (ready.empty()) return;
    if (all_ready) {
        const status st = run_layers(ready, x);
        if (!st.is_ok()) for (auto & s : span_status) s = st;
        return;
    }
    // Some spans dropped out: run the others on a packed copy of their rows.
    std::vector<float> packed;
    std::vector<std::pair<size_t, size_t>> where;  // (offset in x, offset in packed), in floats
    size_t at = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        const size_t n = static_cast<size_t>(spans[i].n_tokens * n_embd);
        if (span_status[i].is_ok()) {
            where.emplace_back(at, packed.size());
            packed.insert(packed.end(), x + at, x + at + n);
        }
        at += n;
    }
    const status st = run_layers(ready, packed.data());
    size_t k = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        if (!span_status[i].is_ok()) continue;
        if (!st.is_ok()) {
            span_status[i] = st;
        } else {
            const size_t n = static_cast<size_t>(spans[i].n_tokens * n_embd);
            std::memcpy(x + where[k].first, packed.data() + where[k].second, n * sizeof(float));
        }
        ++k;
    }
}

// One pass of the model over every span (model_slice::forward_batch): each weight
// matrix is read once for all the lanes in the step, and each row is bitwise what its
// lane computes alone.
status stage::run_layers(std::span<const lane_span> spans, float * x) {
    // Checkpoint copies first, each lane's appended at once (its vector does not move
    // again during the pass), then one capture per checkpoint position in the span.
    std::vector<size_t> captures_before(spans.size(), 0);
    std::vector<std::pair<size_t, size_t>> capture_range(spans.size(), {0, 0});  // into batch_captures_
    batch_captures_.clear();
    for (size_t i = 0; i < spans.size(); ++i) {
        const lane_span & s = spans[i];
        lane_state & lane = lanes_[static_cast<size_t>(s.lane)];
        captures_before[i] = lane.captures.size();
        if (lane.recurrent.empty()) continue;
        auto inside = [&](int64_t c) { return c > s.pos_start && c <= s.pos_start + s.n_tokens; };
        for (int64_t c : s.checkpoints) {
            if (inside(c)) lane.captures.push_back(slice_->make_recurrent_state());
        }
        capture_range[i].first = batch_captures_.size();
        size_t k = captures_before[i];
        int64_t last = s.pos_start;
        for (int64_t c : s.checkpoints) {
            if (!inside(c) || c <= last) continue;  // ascending and distinct, as forward_batch wants them
            batch_captures_.push_back(recurrent_capture{c, &lane.captures[k++]});
            last = c;
        }
        lane.captures.resize(k);
        capture_range[i].second = batch_captures_.size();
    }
    batch_spans_.clear();
    for (size_t i = 0; i < spans.size(); ++i) {
        const lane_span & s = spans[i];
        lane_state & lane = lanes_[static_cast<size_t>(s.lane)];
        const std::span<const recurrent_capture> caps =
            std::span<const recurrent_capture>(batch_captures_).subspan(capture_range[i].first, capture_range[i].second - capture_range[i].first);
        batch_spans_.push_back(sequence_span{lane.kv.get(), s.pos_start, s.n_tokens, lane.recurrent.empty() ? nullptr : &lane.recurrent, caps});
    }
    const status st = slice_->forward_batch(x, batch_spans_, pool_.get(), ws_);
    if (!st.is_ok()) {
        for (size_t i = 0; i < spans.size(); ++i) lanes_[static_cast<size_t>(spans[i].lane)].captures.resize(captures_before[i]);
    }
    return st;
}

void stage::logits(std::span<const float> hidden, int64_t n_rows, std::span<float> out) {
    std::lock_guard<std::mutex> lock(compute_mutex_);
    slice_->head(hidden.data(), n_rows, out.data(), pool_.get(), head_ws_);
}

void stage::truncate_lane(int32_t lane, int64_t n_tokens) {
    if (!check_lane(lane).is_ok()) return;
    lane_state & l = lanes_[static_cast<size_t>(lane)];
    l.kv->truncate(std::max<int64_t>(0, n_tokens));
    if (!l.recurrent.empty()) l.recurrent.truncate(std::max<int64_t>(0, n_tokens));
    l.captures.clear();
}

bool stage::has_recurrent_layers() const { return slice_->has_recurrent_layers(); }

const recurrent_state * stage::lane_recurrent(int32_t lane) const {
    if (!check_lane(lane).is_ok()) return nullptr;
    const recurrent_state & rs = lanes_[static_cast<size_t>(lane)].recurrent;
    return rs.empty() ? nullptr : &rs;
}

status stage::set_lane_recurrent(int32_t lane, const recurrent_state & state) {
    SKIPPY_TRY(check_lane(lane));
    lane_state & l = lanes_[static_cast<size_t>(lane)];
    if (l.recurrent.empty()) return make_error(error_code::invalid_argument, "this stage has no recurrent layers");
    if (!state.has_shape(slice_->recurrent_shape_of())) {
        return make_error(error_code::invalid_argument, "a recurrent state of another shape than this stage's");
    }
    if (state.n_tokens() != l.kv->n_tokens()) {
        return make_error(error_code::invalid_argument, "a recurrent state after " + std::to_string(state.n_tokens()) +
                                                            " positions for a lane holding " + std::to_string(l.kv->n_tokens()));
    }
    l.recurrent = state;
    return status::ok();
}

recurrent_state * stage::lane_recurrent_for_restore(int32_t lane) {
    if (!check_lane(lane).is_ok()) return nullptr;
    recurrent_state & rs = lanes_[static_cast<size_t>(lane)].recurrent;
    return rs.empty() ? nullptr : &rs;
}

std::vector<recurrent_state> stage::take_captures(int32_t lane) {
    if (!check_lane(lane).is_ok()) return {};
    return std::exchange(lanes_[static_cast<size_t>(lane)].captures, {});
}

int64_t stage::lane_recurrent_tokens(int32_t lane) const {
    if (!check_lane(lane).is_ok()) return -1;
    const recurrent_state & rs = lanes_[static_cast<size_t>(lane)].recurrent;
    return rs.empty() ? lane_tokens(lane) : rs.n_tokens();
}

}  // namespace skippy
