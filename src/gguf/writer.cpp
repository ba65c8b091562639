#include "base/byte_io.h"
#include "gguf/gguf.h"

#include <cassert>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace skippy::gguf {
namespace {

void put_string(byte_writer & w, const std::string & s) {
    w.put_u64(s.size());
    w.put_bytes(s.data(), s.size());
}

void put_value(byte_writer & w, const value & v) {
    switch (v.type()) {
        case value_type::u8:  w.put_u8(static_cast<uint8_t>(*v.as_int())); break;
        case value_type::i8:  w.put_u8(static_cast<uint8_t>(static_cast<int8_t>(*v.as_int()))); break;
        case value_type::u16: w.put_u16(static_cast<uint16_t>(*v.as_int())); break;
        case value_type::i16: w.put_u16(static_cast<uint16_t>(static_cast<int16_t>(*v.as_int()))); break;
        case value_type::u32: w.put_u32(static_cast<uint32_t>(*v.as_int())); break;
        case value_type::i32: w.put_i32(static_cast<int32_t>(*v.as_int())); break;
        case value_type::u64: w.put_u64(*v.as_u64()); break;
        case value_type::i64: w.put_i64(*v.as_int()); break;
        case value_type::f32: w.put_f32(static_cast<float>(*v.as_float())); break;
        case value_type::f64: w.put_f64(*v.as_float()); break;
        case value_type::boolean: w.put_u8(*v.as_bool() ? 1 : 0); break;
        case value_type::string: put_string(w, *v.as_string()); break;
        case value_type::array: {
            w.put_u32(static_cast<uint32_t>(v.array_type()));
            w.put_u64(v.as_array()->size());
            for (const auto & e : *v.as_array()) put_value(w, e);
            break;
        }
    }
}

size_t align_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

void writer::set(const std::string & key, value v) {
    for (auto & kv : metadata_) {
        if (kv.first == key) { kv.second = std::move(v); return; }
    }
    metadata_.emplace_back(key, std::move(v));
}

void writer::add_tensor(const std::string & name, std::vector<int64_t> dims, tensor_type type, std::vector<uint8_t> data) {
    int64_t n_rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) n_rows *= dims[i];
    assert(!dims.empty() && data.size() == row_bytes(type, dims[0]) * static_cast<size_t>(n_rows));
    (void)n_rows;
    tensors_.push_back({name, std::move(dims), type, std::move(data)});
}

std::vector<uint8_t> writer::to_bytes() const {
    std::vector<uint8_t> out;
    byte_writer w(out);
    w.put_bytes("GGUF", 4);
    w.put_u32(3);
    w.put_u64(tensors_.size());
    const bool has_alignment = alignment_ != 32;
    w.put_u64(metadata_.size() + (has_alignment ? 1 : 0));
    if (has_alignment) {
        put_string(w, "general.alignment");
        w.put_u32(static_cast<uint32_t>(value_type::u32));
        w.put_u32(static_cast<uint32_t>(alignment_));
    }
    for (const auto & [key, v] : metadata_) {
        put_string(w, key);
        w.put_u32(static_cast<uint32_t>(v.type()));
        put_value(w, v);
    }
    size_t offset = 0;
    for (const auto & t : tensors_) {
        put_string(w, t.name);
        w.put_u32(static_cast<uint32_t>(t.dims.size()));
        for (int64_t d : t.dims) w.put_u64(static_cast<uint64_t>(d));
        w.put_u32(static_cast<uint32_t>(t.type));
        w.put_u64(offset);
        offset = align_up(offset + t.data.size(), alignment_);
    }
    w.put_zeros(align_up(out.size(), alignment_) - out.size());
    for (const auto & t : tensors_) {
        w.put_bytes(t.data.data(), t.data.size());
        w.put_zeros(align_up(t.data.size(), alignment_) - t.data.size());
    }
    return out;
}

status writer::write_file(const std::string & path) const {
    const std::vector<uint8_t> bytes = to_bytes();
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return make_error(error_code::io, "cannot create " + tmp);
        f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        f.flush();
        if (!f) return make_error(error_code::io, "cannot write " + tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return make_error(error_code::io, "cannot rename " + tmp + " to " + path + ": " + ec.message());
    return status::ok();
}

}  // namespace skippy::gguf
