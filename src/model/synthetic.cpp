#include "model/synthetic.h"

#include "kernels/kernels.h"
#include "model/quant_mix.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

namespace skippy {
namespace {

// splitmix64: a reproducible stream whatever the platform.
struct rng {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [-1, 1).
    float symmetric() { return static_cast<float>(static_cast<double>(next() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }
};

std::vector<uint8_t> random_tensor(rng & r, tensor_type type, int64_t n_cols, int64_t n_rows, float amplitude) {
    std::vector<float> row(static_cast<size_t>(n_cols));
    const size_t stride = row_bytes(type, n_cols);
    std::vector<uint8_t> out(stride * static_cast<size_t>(n_rows));
    for (int64_t i = 0; i < n_rows; ++i) {
        for (auto & v : row) v = amplitude * r.symmetric();
        kernels::quantize_row(type, row.data(), out.data() + static_cast<size_t>(i) * stride, n_cols);
    }
    return out;
}

std::vector<uint8_t> f32_vector(rng & r, int64_t n, float center, float spread) {
    std::vector<uint8_t> out(static_cast<size_t>(n) * 4);
    for (int64_t i = 0; i < n; ++i) {
        const float v = center + spread * r.symmetric();
        std::memcpy(out.data() + i * 4, &v, 4);
    }
    return out;
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces.
void add_generated_vocab(gguf::writer & w, int32_t n_vocab) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0.0f, 0.0f, 0.0f};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        tokens.emplace_back(buf);
        scores.push_back(0.0f);
        types.push_back(6);
    }
    // Pieces: letters with and without the word-start marker, then letter pairs.
    const std::string marker = "\xe2\x96\x81";  // U+2581
    std::vector<std::string> pieces;
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    for (char c : letters) { pieces.push_back(std::string(1, c)); pieces.push_back(marker + c); }
    for (char c : std::string(".,!?'")) pieces.push_back(std::string(1, c));
    pieces.push_back(marker);
    for (char a : letters) for (char b : letters) { pieces.push_back(std::string{a, b}); pieces.push_back(marker + a + b); }
    std::set<std::string> seen(tokens.begin(), tokens.end());
    for (const auto & p : pieces) {
        if (static_cast<int32_t>(tokens.size()) >= n_vocab) break;
        if (!seen.insert(p).second) continue;
        tokens.push_back(p);
        scores.push_back(-static_cast<float>(tokens.size()));  // earlier pieces merge first
        types.push_back(1);
    }
    for (int32_t i = static_cast<int32_t>(tokens.size()); i < n_vocab; ++i) {  // filler beyond the piece list
        tokens.push_back(marker + "w" + std::to_string(i));
        scores.push_back(-static_cast<float>(i));
        types.push_back(1);
    }
    w.set("tokenizer.ggml.model", gguf::value::make_string("llama"));
    w.set("tokenizer.ggml.tokens", gguf::value::make_string_array(std::move(tokens)));
    w.set("tokenizer.ggml.scores", gguf::value::make_f32_array(scores));
    w.set("tokenizer.ggml.token_type", gguf::value::make_i32_array(types));
    w.set("tokenizer.ggml.bos_token_id", gguf::value::make_u32(1));
    w.set("tokenizer.ggml.eos_token_id", gguf::value::make_u32(2));
    w.set("tokenizer.ggml.unknown_token_id", gguf::value::make_u32(0));
    w.set("tokenizer.ggml.add_bos_token", gguf::value::make_bool(true));
}

// rope_freqs.weight as Llama 3.1's converter computes it (factor 8, low/high frequency
// factors 1 and 4, original context 8192): pairs of short wavelength keep their
// frequency, long ones are divided by 8, the band between is interpolated smoothly.
void add_llama3_rope_factors(gguf::writer & w, int32_t n_rot, float freq_base) {
    constexpr double factor = 8, low_freq_factor = 1, high_freq_factor = 4, n_ctx_orig = 8192;
    const double low_freq_wavelen = n_ctx_orig / low_freq_factor, high_freq_wavelen = n_ctx_orig / high_freq_factor;
    std::vector<uint8_t> out;
    for (int32_t i = 0; i < n_rot / 2; ++i) {
        const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / n_rot);
        const double wavelen = 2 * 3.14159265358979323846 / freq;
        double f = 1;
        if (wavelen > low_freq_wavelen) {
            f = factor;
        } else if (wavelen >= high_freq_wavelen) {
            const double smooth = (n_ctx_orig / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            f = 1 / ((1 - smooth) / factor + smooth);
        }
        const float v = static_cast<float>(f);
        const auto * bytes = reinterpret_cast<const uint8_t *>(&v);
        out.insert(out.end(), bytes, bytes + 4);
    }
    w.add_tensor("rope_freqs.weight", {n_rot / 2}, tensor_type::f32, std::move(out));
}

}  // namespace

std::optional<synthetic_model_options> synthetic_preset(const std::string & name) {
    synthetic_model_options o;
    if (name == "tiny") {
        o.n_embd = 256; o.n_layer = 4; o.n_head = 8; o.n_head_kv = 4; o.n_ff = 768; o.n_vocab = 512;
        o.type = "Q8_0"; o.name = "skippy-tiny";
        return o;
    }
    if (name == "bench-200m") {
        o.n_embd = 1024; o.n_layer = 12; o.n_head = 16; o.n_head_kv = 4; o.n_ff = 2816; o.n_vocab = 32000;
        o.type = "Q4_K_M"; o.name = "skippy-bench-200m";
        return o;
    }
    return std::nullopt;
}

const char * synthetic_arch_names() { return "llama, llama3, qwen2, qwen3, gemma3, phi3, qwen3moe, gpt-oss, qwen35"; }

result<gguf::writer> build_synthetic_model(const synthetic_model_options & o) {
    auto bad = [](const std::string & msg) { return make_error(error_code::invalid_argument, msg); };
    const std::string & a = o.arch;
    if (a != "llama" && a != "llama3" && a != "qwen2" && a != "qwen3" && a != "gemma3" && a != "phi3" && a != "qwen3moe" &&
        a != "gpt-oss" && a != "qwen35") {
        return bad(std::string("--arch must be one of ") + synthetic_arch_names());
    }
    if (o.n_embd < 1 || o.n_layer < 1 || o.n_head < 1 || o.n_head_kv < 1 || o.n_ff < 1) return bad("model dimensions must be positive");
    if (o.n_embd > 65536 || o.n_ff > 1 << 20 || o.n_layer > 1024 || o.n_vocab > 1 << 22) return bad("model dimensions are too large");
    if (o.head_dim < 0 || o.head_dim > 4096 || o.sliding_window < 0) return bad("head size and sliding window must be in range");
    if (o.head_dim == 0 && o.n_embd % o.n_head != 0) return bad("--n-embd must be a multiple of --n-head");
    if (o.n_head % o.n_head_kv != 0) return bad("--n-head must be a multiple of --n-head-kv");
    const bool gptoss = a == "gpt-oss";
    const bool moe = a == "qwen3moe" || gptoss;
    if (moe && (o.n_expert < 1 || o.n_expert > 4096 || o.n_expert_used < 1 || o.n_expert_used > o.n_expert)) {
        return bad("--n-expert must be in [1, 4096] and --n-expert-used in [1, --n-expert]");
    }
    const int32_t head_dim = o.head_dim > 0 ? o.head_dim : (a == "qwen3" || moe ? 2 : 1) * (o.n_embd / o.n_head);
    if (head_dim % 2 != 0) return bad("the head dimension must be even");

    // What each family writes beyond llama's tensors (docs/model.md).
    const std::string gguf_arch = a == "llama3" ? "llama" : a;
    const bool qkv_bias = a == "qwen2" || a == "gpt-oss";
    const bool hybrid = a == "qwen35";
    const bool qk_norm = a == "qwen3" || a == "gemma3" || a == "qwen3moe" || hybrid;
    const bool post_norms = a == "gemma3";
    const bool fused = a == "phi3";           // attn_qkv and a gate/up ffn_up
    const bool tied = a == "qwen3" || a == "gemma3" || hybrid;
    const bool own_head_dim = a == "qwen3" || a == "gemma3" || moe || hybrid;

    SKIPPY_ASSIGN_OR_RETURN(quant_mix mix, parse_quant_mix(o.type));
    const int32_t q_dim = o.n_head * head_dim, kv_dim = o.n_head_kv * head_dim;
    if (!own_head_dim && q_dim != o.n_embd) return bad("--arch " + a + " needs n_head * head size == n_embd");
    gguf::writer w;
    int32_t n_vocab = o.n_vocab;
    const std::string p = gguf_arch + ".";
    float freq_base = 10000.0f;
    if (a == "qwen2" || a == "qwen3" || a == "gemma3" || moe) freq_base = 1000000.0f;
    if (hybrid) freq_base = 10000000.0f;
    if (a == "llama3") freq_base = 500000.0f;
    if (gptoss) freq_base = 150000.0f;
    w.set("general.architecture", gguf::value::make_string(gguf_arch));
    w.set("general.name", gguf::value::make_string(o.name));
    w.set(p + "context_length", gguf::value::make_u32(static_cast<uint32_t>(o.n_ctx)));
    w.set(p + "embedding_length", gguf::value::make_u32(static_cast<uint32_t>(o.n_embd)));
    w.set(p + "feed_forward_length", gguf::value::make_u32(static_cast<uint32_t>(o.n_ff)));
    w.set(p + "block_count", gguf::value::make_u32(static_cast<uint32_t>(o.n_layer)));
    w.set(p + "attention.head_count", gguf::value::make_u32(static_cast<uint32_t>(o.n_head)));
    w.set(p + "attention.head_count_kv", gguf::value::make_u32(static_cast<uint32_t>(o.n_head_kv)));
    w.set(p + "attention.layer_norm_rms_epsilon",
          gguf::value::make_f32(a == "gemma3" || a == "qwen3" || a == "qwen3moe" || hybrid ? 1e-6f : 1e-5f));
    // qwen35: delta-net layers with q/k groups per KV head and v heads per query head,
    // each d_state = head_dim wide; a quarter of each attention head rotates (M-RoPE
    // sections over its pairs, as Qwen3.5), one attention layer in four.
    const int32_t ssm_conv = 4, ssm_state = head_dim, ssm_groups = o.n_head_kv, ssm_v_heads = o.n_head;
    const int32_t ssm_inner = ssm_v_heads * ssm_state, ssm_channels = ssm_inner + 2 * ssm_groups * ssm_state;
    const int32_t hybrid_rot = std::max(2, head_dim / 4 / 2 * 2);
    if (hybrid) {
        w.set(p + "ssm.conv_kernel", gguf::value::make_u32(ssm_conv));
        w.set(p + "ssm.state_size", gguf::value::make_u32(static_cast<uint32_t>(ssm_state)));
        w.set(p + "ssm.group_count", gguf::value::make_u32(static_cast<uint32_t>(ssm_groups)));
        w.set(p + "ssm.time_step_rank", gguf::value::make_u32(static_cast<uint32_t>(ssm_v_heads)));
        w.set(p + "ssm.inner_size", gguf::value::make_u32(static_cast<uint32_t>(ssm_inner)));
        w.set(p + "full_attention_interval", gguf::value::make_u32(4));
        w.set(p + "rope.dimension_count", gguf::value::make_u32(static_cast<uint32_t>(hybrid_rot)));
        const int32_t pairs = hybrid_rot / 2, sec = pairs * 3 / 8;
        w.set(p + "rope.dimension_sections", gguf::value::make_i32_array({sec, sec, pairs - 2 * sec, 0}));
    }
    if (gptoss) {  // as gpt-oss-20b: YaRN x32 over 4096 positions, a window on even layers
        w.set(p + "rope.scaling.type", gguf::value::make_string("yarn"));
        w.set(p + "rope.scaling.factor", gguf::value::make_f32(32.0f));
        w.set(p + "rope.scaling.original_context_length", gguf::value::make_u32(4096));
        w.set(p + "rope.scaling.yarn_beta_fast", gguf::value::make_f32(32.0f));
        w.set(p + "rope.scaling.yarn_beta_slow", gguf::value::make_f32(1.0f));
        w.set(p + "attention.sliding_window", gguf::value::make_u32(static_cast<uint32_t>(o.sliding_window > 0 ? o.sliding_window : 16)));
    }
    if (moe) {
        w.set(p + "expert_count", gguf::value::make_u32(static_cast<uint32_t>(o.n_expert)));
        w.set(p + "expert_used_count", gguf::value::make_u32(static_cast<uint32_t>(o.n_expert_used)));
        w.set(p + "expert_feed_forward_length", gguf::value::make_u32(static_cast<uint32_t>(o.n_ff)));
    }
    w.set(p + "rope.freq_base", gguf::value::make_f32(freq_base));
    if (own_head_dim) {
        w.set(p + "attention.key_length", gguf::value::make_u32(static_cast<uint32_t>(head_dim)));
        w.set(p + "attention.value_length", gguf::value::make_u32(static_cast<uint32_t>(head_dim)));
    }
    if (a == "gemma3") {
        w.set(p + "rope.freq_base_swa", gguf::value::make_f32(10000.0f));
        w.set(p + "attention.sliding_window", gguf::value::make_u32(static_cast<uint32_t>(o.sliding_window > 0 ? o.sliding_window : 16)));
    }
    if (a == "phi3") {
        w.set(p + "rope.scaling.original_context_length", gguf::value::make_u32(static_cast<uint32_t>(o.n_ctx)));
        w.set(p + "attention.sliding_window", gguf::value::make_u32(2047));  // as the converter writes it; ignored
    }
    w.set("general.file_type", gguf::value::make_u32(mix.file_type));
    const int64_t block = get_tensor_type_traits(static_cast<uint32_t>(mix.base_type))->block_elems;
    if (block > 1) w.set("general.quantization_version", gguf::value::make_u32(2));

    if (o.vocab_from) {
        const gguf::value * tokens = o.vocab_from->find("tokenizer.ggml.tokens");
        if (!tokens || !tokens->as_array() || tokens->as_array()->empty()) return bad("--vocab-from file has no tokenizer.ggml.tokens");
        if (tokens->as_array()->size() > (1u << 22)) return bad("--vocab-from vocabulary is too large");
        n_vocab = static_cast<int32_t>(tokens->as_array()->size());
        for (const auto & [key, v] : o.vocab_from->metadata()) {
            if (key.rfind("tokenizer.", 0) == 0) w.set(key, v);
        }
    } else {
        if (n_vocab < 259 + 8) return bad("--n-vocab must be at least 267 (specials, 256 byte tokens, pieces)");
        add_generated_vocab(w, n_vocab);
    }

    rng r{o.seed * 0x2545f4914f6cdd1dull + 1};
    const float amp_embd = 1.0f;
    const float amp_in = std::sqrt(3.0f / static_cast<float>(o.n_embd));  // unit variance after the product
    const float amp_q = std::sqrt(3.0f / static_cast<float>(q_dim));
    const float amp_ff = std::sqrt(3.0f / static_cast<float>(o.n_ff));
    // One random matrix of the type the mix gives that tensor.
    auto add_matrix = [&](const std::string & name, int32_t il, int64_t n_cols, int64_t n_rows, float amplitude) -> status {
        const tensor_type t = type_for_weight(mix, weight_slot{name, il, o.n_layer, n_cols, o.n_head / o.n_head_kv, false, moe ? o.n_expert : 0});
        const int64_t block_elems = get_tensor_type_traits(static_cast<uint32_t>(t))->block_elems;
        if (n_cols % block_elems != 0) {
            return bad("--n-embd and --n-ff must be multiples of " + std::to_string(block_elems) + " for type " + o.type +
                       " (tensor " + name + " is " + std::string(tensor_type_name(t)) + ")");
        }
        w.add_tensor(name, {n_cols, n_rows}, t, random_tensor(r, t, n_cols, n_rows, amplitude));
        return status::ok();
    };
    // The experts of a layer as one 3-D tensor [n_cols, n_rows, n_expert].
    auto add_experts = [&](const std::string & name, int32_t il, int64_t n_cols, int64_t n_rows, float amplitude) -> status {
        const tensor_type t = type_for_weight(mix, weight_slot{name, il, o.n_layer, n_cols, o.n_head / o.n_head_kv, false, o.n_expert});
        if (n_cols % get_tensor_type_traits(static_cast<uint32_t>(t))->block_elems != 0) {
            return bad("--n-embd and --n-ff do not suit type " + o.type + " (tensor " + name + ")");
        }
        std::vector<uint8_t> data;
        for (int32_t e = 0; e < o.n_expert; ++e) {
            const auto one = random_tensor(r, t, n_cols, n_rows, amplitude);
            data.insert(data.end(), one.begin(), one.end());
        }
        w.add_tensor(name, {n_cols, n_rows, o.n_expert}, t, std::move(data));
        return status::ok();
    };
    auto add_norm = [&](const std::string & name, int64_t n) {
        w.add_tensor(name, {n}, tensor_type::f32, f32_vector(r, n, 1.0f, 0.1f));
    };
    SKIPPY_TRY(add_matrix("token_embd.weight", -1, o.n_embd, n_vocab, amp_embd));
    add_norm("output_norm.weight", o.n_embd);
    if (!tied) SKIPPY_TRY(add_matrix("output.weight", -1, o.n_embd, n_vocab, amp_in));
    if (a == "llama3") add_llama3_rope_factors(w, head_dim, freq_base);
    for (int32_t il = 0; il < o.n_layer; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        add_norm(b + "attn_norm.weight", o.n_embd);
        if (hybrid && (il + 1) % 4 != 0) {  // a gated delta-net layer
            const float amp_inner = std::sqrt(3.0f / static_cast<float>(ssm_inner));
            SKIPPY_TRY(add_matrix(b + "attn_qkv.weight", il, o.n_embd, ssm_channels, amp_in));
            SKIPPY_TRY(add_matrix(b + "attn_gate.weight", il, o.n_embd, ssm_inner, amp_in));
            w.add_tensor(b + "ssm_conv1d.weight", {ssm_conv, ssm_channels}, tensor_type::f32,
                         f32_vector(r, static_cast<int64_t>(ssm_conv) * ssm_channels, 0.0f, 0.5f));
            w.add_tensor(b + "ssm_dt.bias", {ssm_v_heads}, tensor_type::f32, f32_vector(r, ssm_v_heads, 0.0f, 1.0f));
            std::vector<uint8_t> a_log = f32_vector(r, ssm_v_heads, 0.0f, 1.0f);  // stored as -exp(A_log), as the converter does
            for (int32_t h = 0; h < ssm_v_heads; ++h) {
                float v = 0;
                std::memcpy(&v, a_log.data() + h * 4, 4);
                v = -std::exp(v);
                std::memcpy(a_log.data() + h * 4, &v, 4);
            }
            w.add_tensor(b + "ssm_a", {ssm_v_heads}, tensor_type::f32, std::move(a_log));
            SKIPPY_TRY(add_matrix(b + "ssm_beta.weight", il, o.n_embd, ssm_v_heads, amp_in));
            SKIPPY_TRY(add_matrix(b + "ssm_alpha.weight", il, o.n_embd, ssm_v_heads, amp_in));
            add_norm(b + "ssm_norm.weight", ssm_state);
            SKIPPY_TRY(add_matrix(b + "ssm_out.weight", il, ssm_inner, o.n_embd, amp_inner));
            add_norm(b + "post_attention_norm.weight", o.n_embd);
            SKIPPY_TRY(add_matrix(b + "ffn_gate.weight", il, o.n_embd, o.n_ff, amp_in));
            SKIPPY_TRY(add_matrix(b + "ffn_up.weight", il, o.n_embd, o.n_ff, amp_in));
            SKIPPY_TRY(add_matrix(b + "ffn_down.weight", il, o.n_ff, o.n_embd, amp_ff));
            continue;
        }
        if (hybrid) {  // gated attention: attn_q holds [query | gate] per head
            SKIPPY_TRY(add_matrix(b + "attn_q.weight", il, o.n_embd, 2 * q_dim, amp_in));
            SKIPPY_TRY(add_matrix(b + "attn_k.weight", il, o.n_embd, kv_dim, amp_in));
            SKIPPY_TRY(add_matrix(b + "attn_v.weight", il, o.n_embd, kv_dim, amp_in));
        } else if (fused) {
            SKIPPY_TRY(add_matrix(b + "attn_qkv.weight", il, o.n_embd, q_dim + 2 * kv_dim, amp_in));
        } else {
            SKIPPY_TRY(add_matrix(b + "attn_q.weight", il, o.n_embd, q_dim, amp_in));
            SKIPPY_TRY(add_matrix(b + "attn_k.weight", il, o.n_embd, kv_dim, amp_in));
            SKIPPY_TRY(add_matrix(b + "attn_v.weight", il, o.n_embd, kv_dim, amp_in));
        }
        if (qkv_bias) {
            w.add_tensor(b + "attn_q.bias", {q_dim}, tensor_type::f32, f32_vector(r, q_dim, 0.0f, 0.1f));
            w.add_tensor(b + "attn_k.bias", {kv_dim}, tensor_type::f32, f32_vector(r, kv_dim, 0.0f, 0.1f));
            w.add_tensor(b + "attn_v.bias", {kv_dim}, tensor_type::f32, f32_vector(r, kv_dim, 0.0f, 0.1f));
        }
        if (qk_norm) {
            add_norm(b + "attn_q_norm.weight", head_dim);
            add_norm(b + "attn_k_norm.weight", head_dim);
        }
        SKIPPY_TRY(add_matrix(b + "attn_output.weight", il, q_dim, o.n_embd, q_dim == o.n_embd ? amp_in : amp_q));
        if (gptoss) {
            w.add_tensor(b + "attn_output.bias", {o.n_embd}, tensor_type::f32, f32_vector(r, o.n_embd, 0.0f, 0.1f));
            w.add_tensor(b + "attn_sinks.weight", {o.n_head}, tensor_type::f32, f32_vector(r, o.n_head, 0.0f, 1.0f));
        }
        if (post_norms || gptoss || hybrid) add_norm(b + "post_attention_norm.weight", o.n_embd);  // gpt-oss, qwen35: the FFN's norm
        if (!gptoss && !hybrid) add_norm(b + "ffn_norm.weight", o.n_embd);
        if (moe) {
            // The router stays F32, as llama-quantize leaves it.
            w.add_tensor(b + "ffn_gate_inp.weight", {o.n_embd, o.n_expert}, tensor_type::f32,
                         random_tensor(r, tensor_type::f32, o.n_embd, o.n_expert, amp_in));
            SKIPPY_TRY(add_experts(b + "ffn_gate_exps.weight", il, o.n_embd, o.n_ff, amp_in));
            SKIPPY_TRY(add_experts(b + "ffn_up_exps.weight", il, o.n_embd, o.n_ff, amp_in));
            SKIPPY_TRY(add_experts(b + "ffn_down_exps.weight", il, o.n_ff, o.n_embd, amp_ff));
            if (gptoss) {
                w.add_tensor(b + "ffn_gate_inp.bias", {o.n_expert}, tensor_type::f32, f32_vector(r, o.n_expert, 0.0f, 0.1f));
                w.add_tensor(b + "ffn_gate_exps.bias", {o.n_ff, o.n_expert}, tensor_type::f32,
                             f32_vector(r, static_cast<int64_t>(o.n_ff) * o.n_expert, 0.0f, 0.1f));
                w.add_tensor(b + "ffn_up_exps.bias", {o.n_ff, o.n_expert}, tensor_type::f32,
                             f32_vector(r, static_cast<int64_t>(o.n_ff) * o.n_expert, 0.0f, 0.1f));
                w.add_tensor(b + "ffn_down_exps.bias", {o.n_embd, o.n_expert}, tensor_type::f32,
                             f32_vector(r, static_cast<int64_t>(o.n_embd) * o.n_expert, 0.0f, 0.1f));
            }
            continue;
        }
        if (fused) {
            SKIPPY_TRY(add_matrix(b + "ffn_up.weight", il, o.n_embd, 2 * o.n_ff, amp_in));
        } else {
            SKIPPY_TRY(add_matrix(b + "ffn_gate.weight", il, o.n_embd, o.n_ff, amp_in));
            SKIPPY_TRY(add_matrix(b + "ffn_up.weight", il, o.n_embd, o.n_ff, amp_in));
        }
        SKIPPY_TRY(add_matrix(b + "ffn_down.weight", il, o.n_ff, o.n_embd, amp_ff));
        if (post_norms) add_norm(b + "post_ffw_norm.weight", o.n_embd);
    }
    return w;
}

}  // namespace skippy
