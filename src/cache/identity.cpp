#include "cache/identity.h"

#include "base/byte_io.h"

#include <vector>

namespace skippy::cache {
namespace {

// Field ids of the namespace encoding. Never renumber: they are part of every hash.
enum : uint16_t {
    f_domain = 0,
    f_model_identity = 1,
    f_stage_index = 2,
    f_layer_start = 3,
    f_layer_end = 4,
    f_kv_dtype = 5,
    f_kv_layout = 6,
    f_kv_block_tokens = 7,
    f_ctx_size = 8,
    f_platform_tag = 9,
    f_cache_key = 10,
    f_token_start = 11,
};
// Field ids of the prefix encoding.
enum : uint16_t { p_domain = 0, p_namespace = 1, p_tokens = 2 };

constexpr std::string_view namespace_domain = "skippy.kv.namespace.v1";
constexpr std::string_view prefix_domain = "skippy.kv.prefix.v1";

class field_encoder {
public:
    void bytes(uint16_t id, const void * data, size_t n) {
        w_.put_u16(id);
        w_.put_u32(static_cast<uint32_t>(n));
        w_.put_bytes(data, n);
    }
    void text(uint16_t id, std::string_view s) { bytes(id, s.data(), s.size()); }
    void i32(uint16_t id, int32_t v) {
        w_.put_u16(id);
        w_.put_u32(4);
        w_.put_i32(v);
    }
    void i64(uint16_t id, int64_t v) {
        w_.put_u16(id);
        w_.put_u32(8);
        w_.put_i64(v);
    }
    const std::vector<uint8_t> & out() const { return out_; }

private:
    std::vector<uint8_t> out_;
    byte_writer          w_{out_};
};

std::string_view dtype_name(kv_dtype d) { return d == kv_dtype::f16 ? "f16" : "f32"; }

}  // namespace

result<cache_namespace> make_namespace(const namespace_fields & f) {
    if (f.model_identity.empty()) return make_error(error_code::invalid_argument, "cache namespace: empty model identity");
    if (f.stage_index < 0 || f.layer_start < 0 || f.layer_end <= f.layer_start || f.kv_block_tokens <= 0 ||
        f.ctx_size < 0 || f.token_start < 0) {
        return make_error(error_code::invalid_argument,
                          "cache namespace: bad stage " + std::to_string(f.stage_index) + " layers [" +
                              std::to_string(f.layer_start) + "," + std::to_string(f.layer_end) + ") block " +
                              std::to_string(f.kv_block_tokens) + " ctx " + std::to_string(f.ctx_size) +
                              " token_start " + std::to_string(f.token_start));
    }
    field_encoder e;
    e.text(f_domain, namespace_domain);
    e.text(f_model_identity, f.model_identity);
    e.i32(f_stage_index, f.stage_index);
    e.i32(f_layer_start, f.layer_start);
    e.i32(f_layer_end, f.layer_end);
    e.text(f_kv_dtype, dtype_name(f.dtype));
    e.i32(f_kv_layout, f.kv_layout);
    e.i32(f_kv_block_tokens, f.kv_block_tokens);
    e.i32(f_ctx_size, f.ctx_size);
    e.text(f_platform_tag, f.platform_tag);
    e.text(f_cache_key, f.cache_key);
    e.i64(f_token_start, f.token_start);
    cache_namespace ns;
    ns.hash = sha256(e.out());
    ns.stage_index = f.stage_index;
    ns.layer_start = f.layer_start;
    ns.token_start = f.token_start;
    return ns;
}

status check_token_start(const cache_namespace & ns) {
    if (ns.token_start != 0) return make_error(error_code::unsupported, "nonzero_token_start_unsupported");
    return status::ok();
}

digest256 prefix_hash(const cache_namespace & ns, std::span<const token_id> tokens) {
    std::vector<uint8_t> head;
    byte_writer w(head);
    w.put_u16(p_domain);
    w.put_u32(static_cast<uint32_t>(prefix_domain.size()));
    w.put_bytes(prefix_domain.data(), prefix_domain.size());
    w.put_u16(p_namespace);
    w.put_u32(32);
    w.put_bytes(ns.hash.bytes.data(), 32);
    w.put_u16(p_tokens);
    w.put_u32(static_cast<uint32_t>(tokens.size() * 4));
    sha256_hasher h;
    h.update(head);
    // Token ids as i32 little-endian, encoded in chunks to bound the scratch buffer.
    std::vector<uint8_t> chunk;
    chunk.reserve(4096);
    for (size_t i = 0; i < tokens.size(); ++i) {
        byte_writer cw(chunk);
        cw.put_i32(tokens[i]);
        if (chunk.size() == 4096) {
            h.update(chunk);
            chunk.clear();
        }
    }
    h.update(chunk);
    return h.finish();
}

std::string page_id(const cache_namespace & ns, int64_t token_start, int64_t token_count, const digest256 & prefix) {
    return std::to_string(ns.stage_index) + ":" + std::to_string(token_start) + ":" + std::to_string(token_count) + ":" +
           std::to_string(ns.layer_start) + ":" + prefix.hex(8);
}

std::string prefix_page_id(const cache_namespace & ns, std::span<const token_id> tokens) {
    return page_id(ns, 0, static_cast<int64_t>(tokens.size()), prefix_hash(ns, tokens));
}

}  // namespace skippy::cache
