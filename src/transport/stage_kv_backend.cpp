#include "transport/stage_kv_backend.h"

#include <algorithm>
#include <cstring>

namespace skippy::transport {
namespace {

std::vector<kv_sequence *> backend_lanes_of(stage & st) {
    std::vector<kv_sequence *> lanes;
    for (int32_t i = 0; i < st.n_lanes(); ++i) lanes.push_back(&st.lane_kv(i));
    return lanes;
}

snapshot_namespace snapshot_ns_of(const cache::digest256 & ns) {
    snapshot_namespace out{};
    std::memcpy(out.data(), ns.bytes.data(), out.size());
    return out;
}

}  // namespace

result<std::vector<uint8_t>> recurrent_state_snapshot::serialize(const cache::digest256 & ns) const {
    return encode_recurrent_snapshot(state_, shape_, snapshot_ns_of(ns));
}

stage_kv_backend::stage_kv_backend(stage & st)
    : stage_(st),
      kv_(st.kv(), backend_lanes_of(st), st.slice().range().start, st.slice().range().end),
      shape_(st.slice().recurrent_shape_of()),
      recurrent_(st.has_recurrent_layers()) {}

cache::state_snapshot_ptr stage_kv_backend::wrap(recurrent_state state) const {
    return std::make_shared<recurrent_state_snapshot>(std::move(state), shape_);
}

status stage_kv_backend::check_session(int32_t session) const {
    if (session < 0 || session >= stage_.n_lanes()) {
        return make_error(error_code::invalid_argument, "unknown KV session " + std::to_string(session));
    }
    return status::ok();
}

status stage_kv_backend::share_into(int32_t session, std::span<const kv_block_id> blocks, int64_t n_tokens) {
    SKIPPY_TRY(kv_.share_into(session, blocks, n_tokens));
    if (recurrent_) stage_.truncate_lane(session, n_tokens);  // the KV moved under the state: it follows or is invalid
    return status::ok();
}

status stage_kv_backend::truncate_session(int32_t session, int64_t n_tokens) {
    SKIPPY_TRY(check_session(session));
    if (n_tokens < 0) return make_error(error_code::invalid_argument, "negative truncation");
    if (!recurrent_) return kv_.truncate_session(session, n_tokens);
    stage_.truncate_lane(session, n_tokens);
    return status::ok();
}

status stage_kv_backend::import_page(int32_t session, std::span<const uint8_t> page) {
    SKIPPY_TRY(kv_.import_page(session, page));
    // The lane's state no longer sits at the KV's end: import_state sets it.
    if (recurrent_) stage_.truncate_lane(session, stage_.lane_tokens(session));
    return status::ok();
}

result<cache::state_snapshot_ptr> stage_kv_backend::snapshot_state(int32_t session, int64_t n_tokens) const {
    SKIPPY_TRY(check_session(session));
    if (!recurrent_) return make_error(error_code::unsupported, "this stage has no recurrent state");
    const recurrent_state * live = stage_.lane_recurrent(session);
    if (!live || live->n_tokens() != n_tokens) {
        return make_error(error_code::invalid_argument, "lane " + std::to_string(session) + "'s recurrent state holds " +
                                                            std::to_string(live ? live->n_tokens() : -1) + " positions, not " +
                                                            std::to_string(n_tokens));
    }
    return wrap(*live);
}

status stage_kv_backend::import_state(int32_t session, std::span<const uint8_t> snapshot, const cache::digest256 & ns) {
    SKIPPY_TRY(check_session(session));
    if (!recurrent_) return make_error(error_code::unsupported, "this stage has no recurrent state");
    recurrent_state * live = stage_.lane_recurrent_for_restore(session);
    if (!live) return make_error(error_code::internal, "lane " + std::to_string(session) + " has no recurrent state");
    // Decoded in place: the snapshot is checked whole (shape, namespace, position at the
    // lane's KV length) before a byte of the lane's state changes.
    return decode_recurrent_snapshot(snapshot, shape_, snapshot_ns_of(ns), stage_.lane_tokens(session), *live);
}

}  // namespace skippy::transport
