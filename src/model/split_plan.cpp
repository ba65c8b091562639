#include "model/split_plan.h"

#include <algorithm>
#include <string>

namespace skippy {
namespace {

// From the last layer backwards, each stage takes layers while it stays within `cap`
// bytes, and closes early when the layers left are only enough for one per stage still
// to open. Empty result: `cap` cannot be met with n_stages stages.
std::vector<layer_range> cut_within(const std::vector<int64_t> & bytes, int64_t head, int32_t n_stages, int64_t cap) {
    const int32_t n_layer = static_cast<int32_t>(bytes.size());
    std::vector<layer_range> out;
    int32_t end = n_layer, stages_left = n_stages;
    int64_t cost = head;
    for (int32_t il = n_layer - 1; il >= 0; --il) {
        const bool nonempty = end > il + 1;
        if (nonempty && (cost + bytes[static_cast<size_t>(il)] > cap || il + 1 == stages_left - 1)) {
            if (stages_left == 1) return {};
            out.push_back({il + 1, end});
            end = il + 1;
            --stages_left;
            cost = 0;
        }
        cost += bytes[static_cast<size_t>(il)];
        if (cost > cap) return {};
    }
    if (stages_left != 1) return {};
    out.push_back({0, end});
    std::reverse(out.begin(), out.end());
    return out;
}

}  // namespace

result<layer_split> plan_layer_split(const gguf::file & f, int32_t n_layer, int32_t n_stages) {
    if (n_stages < 1 || n_stages > n_layer) {
        return make_error(error_code::invalid_argument, "cannot split " + std::to_string(n_layer) + " layers into " +
                                                            std::to_string(n_stages) + " stages");
    }
    std::vector<int64_t> bytes(static_cast<size_t>(n_layer), 0);
    int64_t head = 0;
    const bool tied = f.find_tensor("output.weight") == nullptr;
    for (const auto & t : f.tensors()) {
        const auto n = static_cast<int64_t>(t.n_bytes);
        if (t.name == "output.weight" || t.name == "output_norm.weight" || (tied && t.name == "token_embd.weight")) head += n;
        if (t.name.rfind("blk.", 0) != 0) continue;
        const size_t dot = t.name.find('.', 4);
        int64_t il = -1;
        try {
            il = std::stoll(t.name.substr(4, dot - 4));
        } catch (...) {
            continue;
        }
        if (il >= 0 && il < n_layer) bytes[static_cast<size_t>(il)] += n;
    }
    layer_split s;
    s.by_bytes = std::any_of(bytes.begin(), bytes.end(), [&](int64_t b) { return b != bytes[0]; });
    if (!s.by_bytes) {
        const int32_t base = n_layer / n_stages, extra = n_layer % n_stages;
        for (int32_t i = 0, start = 0; i < n_stages; ++i) {
            const int32_t n = base + (i < extra ? 1 : 0);
            s.stages.push_back({start, start + n});
            start += n;
        }
    } else {
        int64_t lo = 0, hi = head;
        for (int64_t b : bytes) hi += b;
        while (lo < hi) {  // the least cap a split meets
            const int64_t mid = lo + (hi - lo) / 2;
            if (cut_within(bytes, head, n_stages, mid).empty()) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        s.stages = cut_within(bytes, head, n_stages, lo);
    }
    for (const layer_range & r : s.stages) {
        int64_t b = r.end == n_layer ? head : 0;
        for (int32_t il = r.start; il < r.end; ++il) b += bytes[static_cast<size_t>(il)];
        s.stage_bytes.push_back(b);
    }
    return s;
}

}  // namespace skippy
