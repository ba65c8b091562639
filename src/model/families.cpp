// The architecture table: general.architecture -> the family's graph builder
// (family_<name>.cpp). Adding a family is a new file and a row here.
#include "model/family.h"

#include <array>

namespace skippy {

const family_i & family_llama();
const family_i & family_qwen2();
const family_i & family_qwen3();
const family_i & family_gemma3();
const family_i & family_phi3();
const family_i & family_qwen3moe();
const family_i & family_gptoss();
const family_i & family_qwen35();

namespace {

const std::array<family_entry, 8> & families() {
    static const std::array<family_entry, 8> table = {{
        {"llama", model_arch::llama, family_llama()},
        {"qwen2", model_arch::qwen2, family_qwen2()},
        {"qwen3", model_arch::qwen3, family_qwen3()},
        {"gemma3", model_arch::gemma3, family_gemma3()},
        {"phi3", model_arch::phi3, family_phi3()},
        {"qwen3moe", model_arch::qwen3moe, family_qwen3moe()},
        {"gpt-oss", model_arch::gpt_oss, family_gptoss()},
        {"qwen35", model_arch::qwen35, family_qwen35()},
    }};
    return table;
}

}  // namespace

const family_entry * find_family(std::string_view arch_name) {
    for (const auto & e : families()) {
        if (e.arch_name == arch_name) return &e;
    }
    return nullptr;
}

std::string family_names() {
    std::string s;
    for (const auto & e : families()) {
        if (!s.empty()) s += ", ";
        s += e.arch_name;
    }
    return s;
}

}  // namespace skippy
