#include "transport/topology.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace skippy::transport {
namespace {

status bad(const std::string & msg) { return make_error(error_code::invalid_argument, "topology: " + msg); }

}  // namespace

result<topology> topology::parse(const std::string & json_text, const std::string & base_dir) {
    nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    if (!j.contains("model") || !j["model"].is_string()) return bad("\"model\" must be a string path");
    if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty()) return bad("\"stages\" must be a non-empty array");
    if (j["stages"].size() > 64) return bad("at most 64 stages");
    topology t;
    std::filesystem::path model = j["model"].get<std::string>();
    if (model.is_relative() && !base_dir.empty()) model = std::filesystem::path(base_dir) / model;
    t.model_path = model.lexically_normal().string();
    for (size_t i = 0; i < j["stages"].size(); ++i) {
        const auto & s = j["stages"][i];
        const std::string where = "stage " + std::to_string(i);
        if (!s.is_object()) return bad(where + " must be an object");
        if (!s.contains("layers") || !s["layers"].is_array() || s["layers"].size() != 2 ||
            !s["layers"][0].is_number_integer() || !s["layers"][1].is_number_integer()) {
            return bad(where + ": \"layers\" must be [start, end]");
        }
        const int64_t a = s["layers"][0], b = s["layers"][1];
        if (a < 0 || b > 4096 || a >= b) return bad(where + ": layers [" + std::to_string(a) + ", " + std::to_string(b) + ") are empty or out of range");
        if (!s.contains("endpoint") || !s["endpoint"].is_string()) return bad(where + ": \"endpoint\" must be \"host:port\"");
        auto ep = endpoint::parse(s["endpoint"].get<std::string>());
        if (!ep.is_ok()) return bad(where + ": " + ep.error().message());
        t.stages.push_back({{static_cast<int32_t>(a), static_cast<int32_t>(b)}, *ep});
    }
    for (size_t i = 0; i < t.stages.size(); ++i) {
        if (t.stages[i].layers.start != (i == 0 ? 0 : t.stages[i - 1].layers.end)) {
            return bad("stage " + std::to_string(i) + " does not start where the previous one ends");
        }
    }
    return t;
}

result<topology> topology::load(const std::string & path) {
    std::ifstream in(path);
    if (!in) return make_error(error_code::not_found, "cannot read topology file " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return parse(ss.str(), std::filesystem::path(path).parent_path().string());
}

status topology::validate(int32_t n_layer) const {
    if (stages.empty()) return bad("no stages");
    if (stages.back().layers.end != n_layer) {
        return bad("the last stage ends at layer " + std::to_string(stages.back().layers.end) + " but the model has " +
                   std::to_string(n_layer) + " layers");
    }
    std::set<std::string> seen;
    for (const auto & s : stages) {
        if (!seen.insert(s.address.to_string()).second) return bad("endpoint " + s.address.to_string() + " is used twice");
    }
    return status::ok();
}

std::string topology::to_json() const {
    nlohmann::json j;
    j["model"] = model_path;
    j["stages"] = nlohmann::json::array();
    for (const auto & s : stages) {
        j["stages"].push_back({{"layers", {s.layers.start, s.layers.end}}, {"endpoint", s.address.to_string()}});
    }
    return j.dump(2);
}

result<topology> even_split(const std::string & model_path, int32_t n_layer, int32_t n_stages, const std::string & host,
                            uint16_t base_port) {
    if (n_stages < 1 || n_stages > n_layer) {
        return bad("cannot split " + std::to_string(n_layer) + " layers over " + std::to_string(n_stages) + " stages");
    }
    if (static_cast<int32_t>(base_port) + n_stages - 1 > 65535) return bad("ports run past 65535");
    topology t;
    t.model_path = model_path;
    int32_t start = 0;
    for (int32_t i = 0; i < n_stages; ++i) {
        const int32_t size = n_layer / n_stages + (i < n_layer % n_stages ? 1 : 0);
        t.stages.push_back({{start, start + size}, {host, static_cast<uint16_t>(base_port + i)}});
        start += size;
    }
    return t;
}

}  // namespace skippy::transport
