#include "gguf/gguf.h"

#include <charconv>
#include <cmath>

namespace skippy::gguf {

std::string_view value_type_name(value_type t) {
    switch (t) {
        case value_type::u8:      return "u8";
        case value_type::i8:      return "i8";
        case value_type::u16:     return "u16";
        case value_type::i16:     return "i16";
        case value_type::u32:     return "u32";
        case value_type::i32:     return "i32";
        case value_type::f32:     return "f32";
        case value_type::boolean: return "bool";
        case value_type::string:  return "string";
        case value_type::array:   return "array";
        case value_type::u64:     return "u64";
        case value_type::i64:     return "i64";
        case value_type::f64:     return "f64";
    }
    return "unknown";
}

value value::make_int(value_type t, int64_t v) {
    value r;
    r.type_ = t;
    r.int_ = v;
    r.uint_ = static_cast<uint64_t>(v);
    return r;
}

value value::make_array(value_type elem_type, std::vector<value> elems) {
    value r;
    r.type_ = value_type::array;
    r.array_type_ = elem_type;
    r.array_ = std::move(elems);
    return r;
}

value value::make_string_array(std::vector<std::string> v) {
    std::vector<value> elems;
    elems.reserve(v.size());
    for (auto & s : v) elems.push_back(make_string(std::move(s)));
    return make_array(value_type::string, std::move(elems));
}

value value::make_f32_array(const std::vector<float> & v) {
    std::vector<value> elems;
    elems.reserve(v.size());
    for (float f : v) elems.push_back(make_f32(f));
    return make_array(value_type::f32, std::move(elems));
}

value value::make_i32_array(const std::vector<int32_t> & v) {
    std::vector<value> elems;
    elems.reserve(v.size());
    for (int32_t i : v) elems.push_back(make_i32(i));
    return make_array(value_type::i32, std::move(elems));
}

bool value::is_integer() const {
    switch (type_) {
        case value_type::u8: case value_type::i8: case value_type::u16: case value_type::i16:
        case value_type::u32: case value_type::i32: case value_type::u64: case value_type::i64:
            return true;
        default:
            return false;
    }
}

std::optional<int64_t> value::as_int(int64_t lo, int64_t hi) const {
    if (!is_integer()) return std::nullopt;
    if (type_ == value_type::u64 && uint_ > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    if (int_ < lo || int_ > hi) return std::nullopt;
    return int_;
}

std::optional<uint64_t> value::as_u64() const {
    if (!is_integer()) return std::nullopt;
    if (type_ == value_type::u64) return uint_;
    if (int_ < 0) return std::nullopt;
    return static_cast<uint64_t>(int_);
}

std::optional<double> value::as_float() const {
    if (type_ == value_type::f32 || type_ == value_type::f64) return float_;
    return std::nullopt;
}

std::optional<bool> value::as_bool() const {
    if (type_ != value_type::boolean) return std::nullopt;
    return int_ != 0;
}

int32_t block_index(std::string_view tensor_name) {
    constexpr std::string_view prefix = "blk.";
    if (!tensor_name.starts_with(prefix)) return -1;
    const std::string_view rest = tensor_name.substr(prefix.size());
    int32_t il = -1;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), il);
    const bool ok = ec == std::errc() && end != rest.data() && end + 1 < rest.data() + rest.size() && *end == '.' && il >= 0;
    return ok ? il : -1;
}

int64_t tensor_info::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

}  // namespace skippy::gguf
