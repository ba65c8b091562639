#include "model/split_plan.h"

#include <algorithm>
#include <string>

namespace skippy {
namespace {

// From the last layer backwards, each stage takes layers while its cost (the layers'
// `layer_cost`, the last stage's also `head`) stays within `cap`, and closes early
// when the layers left are only enough for one per stage still to open. Empty result:
// `cap` cannot be met with n_stages stages.
std::vector<layer_range> cut_within(const std::vector<int64_t> & layer_cost, int64_t head, int32_t n_stages, int64_t cap) {
    const int32_t n_layer = static_cast<int32_t>(layer_cost.size());
    std::vector<layer_range> out;
    int32_t end = n_layer, stages_left = n_stages;
    int64_t cost = head;
    for (int32_t il = n_layer - 1; il >= 0; --il) {
        const bool nonempty = end > il + 1;
        if (nonempty && (cost + layer_cost[static_cast<size_t>(il)] > cap || il + 1 == stages_left - 1)) {
            if (stages_left == 1) return {};
            out.push_back({il + 1, end});
            end = il + 1;
            --stages_left;
            cost = 0;
        }
        cost += layer_cost[static_cast<size_t>(il)];
        if (cost > cap) return {};
    }
    if (stages_left != 1) return {};
    out.push_back({0, end});
    std::reverse(out.begin(), out.end());
    return out;
}

// The least cap a contiguous split of `cost` (head on the last stage) meets.
std::vector<layer_range> balanced_split(const std::vector<int64_t> & cost, int64_t head, int32_t n_stages) {
    int64_t lo = 0, hi = head;
    for (int64_t c : cost) hi += c;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (cut_within(cost, head, n_stages, mid).empty()) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return cut_within(cost, head, n_stages, lo);
}

std::vector<int64_t> stage_sums(const std::vector<layer_range> & stages, const std::vector<int64_t> & cost, int64_t head,
                                int32_t n_layer) {
    std::vector<int64_t> out;
    for (const layer_range & r : stages) {
        int64_t b = r.end == n_layer ? head : 0;
        for (int32_t il = r.start; il < r.end; ++il) b += cost[static_cast<size_t>(il)];
        out.push_back(b);
    }
    return out;
}

}  // namespace

result<layer_split> plan_layer_split(const gguf::file & f, int32_t n_layer, int32_t n_stages, split_balance balance) {
    if (n_stages < 1 || n_stages > n_layer) {
        return make_error(error_code::invalid_argument, "cannot split " + std::to_string(n_layer) + " layers into " +
                                                            std::to_string(n_stages) + " stages");
    }
    // An expert tensor's multiply-adds per token are its elements' top-k share.
    const std::string arch = f.get_string("general.architecture").value_or("");
    const int64_t n_expert = f.get_int(arch + ".expert_count").value_or(0);
    const int64_t n_used = f.get_int(arch + ".expert_used_count").value_or(0);
    const double expert_share =
        n_expert > 0 && n_used > 0 && n_used <= n_expert ? static_cast<double>(n_used) / static_cast<double>(n_expert) : 1.0;
    std::vector<int64_t> bytes(static_cast<size_t>(n_layer), 0), macs(static_cast<size_t>(n_layer), 0);
    int64_t head = 0, head_macs = 0;
    const bool tied = f.find_tensor("output.weight") == nullptr;
    for (const auto & t : f.tensors()) {
        const auto n = static_cast<int64_t>(t.n_bytes);
        const bool expert = t.name.find("_exps.") != std::string::npos;
        const auto m = static_cast<int64_t>(static_cast<double>(t.n_elements()) * (expert ? expert_share : 1.0));
        if (t.name == "output.weight" || t.name == "output_norm.weight" || (tied && t.name == "token_embd.weight")) {
            head += n;
            head_macs += m;
        }
        const int32_t il = gguf::block_index(t.name);
        if (il >= 0 && il < n_layer) {
            bytes[static_cast<size_t>(il)] += n;
            macs[static_cast<size_t>(il)] += m;
        }
    }
    layer_split s;
    s.by_compute = balance == split_balance::compute;
    s.by_bytes = !s.by_compute && std::any_of(bytes.begin(), bytes.end(), [&](int64_t b) { return b != bytes[0]; });
    if (s.by_compute) {
        s.stages = balanced_split(macs, head_macs, n_stages);
    } else if (!s.by_bytes) {
        const int32_t base = n_layer / n_stages, extra = n_layer % n_stages;
        for (int32_t i = 0, start = 0; i < n_stages; ++i) {
            const int32_t n = base + (i < extra ? 1 : 0);
            s.stages.push_back({start, start + n});
            start += n;
        }
    } else {
        s.stages = balanced_split(bytes, head, n_stages);
    }
    s.stage_bytes = stage_sums(s.stages, bytes, head, n_layer);
    s.stage_multiply_adds = stage_sums(s.stages, macs, head_macs, n_layer);
    return s;
}

}  // namespace skippy
