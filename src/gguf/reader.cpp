#include "base/byte_io.h"
#include "base/escape.h"
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

namespace skippy::gguf {
namespace {

constexpr uint8_t  k_magic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t k_max_dims = 4;           // ggml's GGML_MAX_DIMS
constexpr int      k_max_array_depth = 3;    // nested arrays deeper than this are refused
constexpr size_t   k_max_alignment = 1u << 20;

// Smallest encoded size of one value of a type, used to bound counts by the bytes
// left before anything is allocated.
size_t min_encoded_bytes(value_type t) {
    switch (t) {
        case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
        case value_type::u16: case value_type::i16: return 2;
        case value_type::u32: case value_type::i32: case value_type::f32: return 4;
        case value_type::u64: case value_type::i64: case value_type::f64: return 8;
        case value_type::string: return 8;
        case value_type::array: return 12;
    }
    return 1;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(value_type::f64); }

// A key or tensor name from the file, quoted for a message: escaped (control bytes,
// invalid UTF-8) and cut when long, so a hostile name cannot garble a log.
std::string quoted(std::string_view name) { return "'" + escape_bytes(name) + "'"; }

// The metadata memory budget of open_options for a file of `file_bytes`.
uint64_t metadata_budget_bytes(const open_options & o, size_t file_bytes) {
    const uint64_t scaled = file_bytes > o.max_metadata_bytes / std::max<uint64_t>(1, o.metadata_bytes_per_file_byte)
                                ? o.max_metadata_bytes
                                : file_bytes * o.metadata_bytes_per_file_byte;
    return std::min(o.max_metadata_bytes, std::max(o.min_metadata_bytes, scaled));
}

class parser {
public:
    parser(std::span<const uint8_t> bytes, const open_options & opts)
        : r_(bytes), opts_(opts), budget_bytes_(metadata_budget_bytes(opts, bytes.size())) {}

    // Accounts for `count` parsed objects of `each_bytes` before they are allocated.
    status charge(uint64_t count, uint64_t each_bytes, const std::string & what) {
        const uint64_t left = budget_bytes_ - used_bytes_;
        if (each_bytes != 0 && count > left / each_bytes) {
            return bad(what + " would take more than the " + std::to_string(budget_bytes_ >> 20) +
                       " MiB of memory allowed for this file's metadata (" + std::to_string(used_bytes_ >> 20) +
                       " MiB used; see gguf::open_options)");
        }
        used_bytes_ += count * each_bytes;
        return status::ok();
    }

    status truncated(const char * what) const {
        return make_error(error_code::invalid_data,
                          std::string("gguf: file truncated while reading ") + what + " (at byte " +
                              std::to_string(r_.offset()) + ")");
    }
    status bad(std::string msg) const {
        return make_error(error_code::invalid_data,
                          "gguf: " + msg + " (at byte " + std::to_string(r_.offset()) + ")");
    }

    status read_string(std::string & out, const char * what) {
        uint64_t len = 0;
        if (!r_.get_u64(len)) return truncated(what);
        if (len > r_.remaining()) return bad(std::string(what) + " length " + std::to_string(len) + " exceeds the file");
        SKIPPY_TRY(charge(len, 1, what));
        std::span<const uint8_t> bytes;
        if (!r_.get_span(static_cast<size_t>(len), bytes)) return truncated(what);
        out.assign(reinterpret_cast<const char *>(bytes.data()), bytes.size());
        return status::ok();
    }

    status read_value(value_type t, value & out, int depth) {
        switch (t) {
            case value_type::u8:  { uint8_t v;  if (!r_.get_u8(v)) return truncated("u8 value"); out = value::make_int(t, v); break; }
            case value_type::i8:  { uint8_t v;  if (!r_.get_u8(v)) return truncated("i8 value"); out = value::make_int(t, static_cast<int8_t>(v)); break; }
            case value_type::u16: { uint16_t v; if (!r_.get_u16(v)) return truncated("u16 value"); out = value::make_int(t, v); break; }
            case value_type::i16: { uint16_t v; if (!r_.get_u16(v)) return truncated("i16 value"); out = value::make_int(t, static_cast<int16_t>(v)); break; }
            case value_type::u32: { uint32_t v; if (!r_.get_u32(v)) return truncated("u32 value"); out = value::make_int(t, v); break; }
            case value_type::i32: { int32_t v;  if (!r_.get_i32(v)) return truncated("i32 value"); out = value::make_int(t, v); break; }
            case value_type::u64: { uint64_t v; if (!r_.get_u64(v)) return truncated("u64 value"); out = value::make_u64(v); break; }
            case value_type::i64: { int64_t v;  if (!r_.get_i64(v)) return truncated("i64 value"); out = value::make_int(t, v); break; }
            case value_type::f32: { float v;    if (!r_.get_f32(v)) return truncated("f32 value"); out = value::make_f32(v); break; }
            case value_type::f64: { double v;   if (!r_.get_f64(v)) return truncated("f64 value"); out = value::make_f64(v); break; }
            case value_type::boolean: {
                uint8_t v;
                if (!r_.get_u8(v)) return truncated("bool value");
                if (v > 1) return bad("bool value " + std::to_string(v) + " is neither 0 nor 1");
                out = value::make_bool(v != 0);
                break;
            }
            case value_type::string: {
                std::string s;
                SKIPPY_TRY(read_string(s, "string value"));
                out = value::make_string(std::move(s));
                break;
            }
            case value_type::array: {
                if (depth >= k_max_array_depth) return bad("arrays nested too deeply");
                uint32_t raw_elem = 0;
                uint64_t count = 0;
                if (!r_.get_u32(raw_elem)) return truncated("array element type");
                if (!known_value_type(raw_elem)) return bad("unknown array element type " + std::to_string(raw_elem));
                if (!r_.get_u64(count)) return truncated("array length");
                const auto elem = static_cast<value_type>(raw_elem);
                if (count > opts_.max_array_elements) return bad("array length " + std::to_string(count) + " over the limit");
                if (count > r_.remaining() / min_encoded_bytes(elem)) {
                    return bad("array length " + std::to_string(count) + " exceeds the file");
                }
                SKIPPY_TRY(charge(count, sizeof(value), "array"));
                std::vector<value> elems(static_cast<size_t>(count));
                for (auto & e : elems) SKIPPY_TRY(read_value(elem, e, depth + 1));
                out = value::make_array(elem, std::move(elems));
                break;
            }
        }
        return status::ok();
    }

    byte_reader & reader() { return r_; }

private:
    byte_reader          r_;
    const open_options & opts_;
    const uint64_t       budget_bytes_;
    uint64_t             used_bytes_ = 0;
};

}  // namespace

constexpr size_t k_huge_page_bytes = size_t(2) << 20;

// Whether the kernel hands out transparent huge pages to memory advised for them: the
// selected mode of /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise".
bool transparent_huge_pages_on() {
    static const bool on = [] {
        std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
        std::string modes;
        std::getline(in, modes);
        return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
    }();
    return on;
}

file::~file() {
    if (reserved_) {
        munmap(reserved_, reserved_bytes_);
    } else if (mapped_ && base_) {
        munmap(const_cast<uint8_t *>(base_), size_);
    }
    if (fd_ >= 0) ::close(fd_);
}

result<uint64_t> file::back_with_huge_pages(std::span<const byte_range> ranges) const {
    if (!mapped_ || !reserved_ || fd_ < 0 || !transparent_huge_pages_on()) return uint64_t{0};
    std::lock_guard<std::mutex> lock(huge_mutex_);
    const size_t n_chunks = (size_ + k_huge_page_bytes - 1) / k_huge_page_bytes;
    if (huge_chunks_.size() != n_chunks) huge_chunks_.assign(n_chunks, false);
    std::vector<bool> wanted(n_chunks, false);
    for (const byte_range & r : ranges) {
        if (r.n_bytes == 0 || r.offset >= size_) continue;
        const uint64_t end = std::min<uint64_t>(size_, r.offset + std::min<uint64_t>(r.n_bytes, size_));
        for (uint64_t c = r.offset / k_huge_page_bytes; c * k_huge_page_bytes < end; ++c) wanted[c] = !huge_chunks_[c];
    }
    uint64_t moved = 0;
    for (size_t c0 = 0; c0 < n_chunks;) {
        if (!wanted[c0]) {
            ++c0;
            continue;
        }
        size_t c1 = c0;
        while (c1 < n_chunks && wanted[c1]) ++c1;
        const size_t len = (c1 - c0) * k_huge_page_bytes;
        const uint64_t from = c0 * k_huge_page_bytes;
        const uint64_t file_bytes = std::min<uint64_t>(size_, c1 * k_huge_page_bytes) - from;
        // Fresh memory at a 2 MiB boundary (over-allocated, the slack given back).
        void * raw = mmap(nullptr, len + k_huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            return make_error(error_code::io, "cannot allocate memory for the weights: " + std::string(std::strerror(errno)));
        }
        auto * tmp = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(raw) + k_huge_page_bytes - 1) & ~(k_huge_page_bytes - 1));
        madvise(tmp, len, MADV_HUGEPAGE);
        uint64_t done = 0;
        while (done < file_bytes) {
            const ssize_t n = pread(fd_, tmp + done, static_cast<size_t>(file_bytes - done), static_cast<off_t>(from + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            done += static_cast<uint64_t>(n);
        }
        uint8_t * at = const_cast<uint8_t *>(base_) + from;
        if (done != file_bytes || mprotect(tmp, len, PROT_READ) != 0 ||
            mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
            const int err = errno;
            munmap(raw, len + k_huge_page_bytes);  // the file mapping at `at` is untouched
            return make_error(error_code::io, "cannot move " + path_ + "'s weights to huge pages: " +
                                                  (done != file_bytes ? std::string("short read") : std::string(std::strerror(err))));
        }
        // The slack around the moved range: before it (maybe none) and after it.
        const size_t head = static_cast<size_t>(tmp - static_cast<uint8_t *>(raw));
        if (head > 0) munmap(raw, head);
        munmap(tmp + len, k_huge_page_bytes - head);
        for (size_t c = c0; c < c1; ++c) huge_chunks_[c] = true;
        moved += len;
        c0 = c1;
    }
    return moved;
}

result<std::unique_ptr<file>> file::open(const std::string & path, const open_options & opts) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        return make_error(err == ENOENT ? error_code::not_found : err == EACCES ? error_code::permission : error_code::io,
                          "cannot open " + path + ": " + std::strerror(err));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error(error_code::io, path + " is not a regular file");
    }
    auto f = std::unique_ptr<file>(new file());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ == 0) {
        ::close(fd);
        return make_error(error_code::invalid_data, "gguf: " + path + " is empty");
    }
    // The mapping starts at a 2 MiB boundary of a reservation 4 MiB longer than the file,
    // so that back_with_huge_pages can put whole huge pages over any of its chunks (the
    // last one past the end of the file too).
    const size_t reserved_bytes = f->size_ + 2 * k_huge_page_bytes;
    void * reserved = mmap(nullptr, reserved_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) {
        ::close(fd);
        return make_error(error_code::io, "cannot map " + path + ": " + std::strerror(errno));
    }
    f->reserved_ = reserved;
    f->reserved_bytes_ = reserved_bytes;
    auto * aligned = reinterpret_cast<void *>((reinterpret_cast<uintptr_t>(reserved) + k_huge_page_bytes - 1) & ~(k_huge_page_bytes - 1));
    void * p = mmap(aligned, f->size_, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        ::close(fd);
        return make_error(error_code::io, "cannot map " + path + ": " + std::strerror(errno));
    }
    f->fd_ = fd;
    f->base_ = static_cast<const uint8_t *>(p);
    f->mapped_ = true;
    status st_parse = f->parse(opts);
    if (!st_parse.is_ok()) return st_parse.with_context(path);
    return f;
}

result<std::unique_ptr<file>> file::from_bytes(std::span<const uint8_t> bytes, const open_options & opts) {
    auto f = std::unique_ptr<file>(new file());
    f->path_ = "<memory>";
    f->owned_.assign(bytes.begin(), bytes.end());
    f->base_ = f->owned_.data();
    f->size_ = f->owned_.size();
    SKIPPY_TRY(f->parse(opts));
    return f;
}

status file::parse(const open_options & opts) {
    parser p(std::span<const uint8_t>(base_, size_), opts);
    byte_reader & r = p.reader();

    std::span<const uint8_t> magic;
    if (!r.get_span(4, magic)) return p.truncated("magic");
    if (std::memcmp(magic.data(), k_magic, 4) != 0) return p.bad("bad magic (not a GGUF file)");
    if (!r.get_u32(version_)) return p.truncated("version");
    if (version_ != 2 && version_ != 3) {
        return make_error(error_code::unsupported, "gguf: version " + std::to_string(version_) + " unsupported (2 and 3 are)");
    }
    uint64_t n_tensors = 0, n_kv = 0;
    if (!r.get_u64(n_tensors)) return p.truncated("tensor count");
    if (!r.get_u64(n_kv)) return p.truncated("metadata count");
    // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor
    // info at least 8 + 4 + 8 + 4 + 8. Counts beyond what the file can hold are lies.
    if (n_kv > r.remaining() / 13) return p.bad("metadata count " + std::to_string(n_kv) + " exceeds the file");
    if (n_tensors > r.remaining() / 32) return p.bad("tensor count " + std::to_string(n_tensors) + " exceeds the file");

    // Each pair, and its entry in the key index (a tree node, about 96 bytes).
    SKIPPY_TRY(p.charge(n_kv, sizeof(metadata_[0]) + 96, "metadata count " + std::to_string(n_kv)));
    metadata_.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key;
        SKIPPY_TRY(p.read_string(key, "metadata key"));
        if (key.empty()) return p.bad("empty metadata key");
        uint32_t raw_type = 0;
        if (!r.get_u32(raw_type)) return p.truncated("metadata type");
        if (!known_value_type(raw_type)) return p.bad("metadata " + quoted(key) + " has unknown type " + std::to_string(raw_type));
        value v;
        SKIPPY_TRY(p.read_value(static_cast<value_type>(raw_type), v, 0).with_context("metadata " + quoted(key)));
        if (metadata_index_.count(key)) return p.bad("duplicate metadata key " + quoted(key));
        metadata_index_.emplace(key, metadata_.size());
        metadata_.emplace_back(std::move(key), std::move(v));
    }

    if (const value * a = find("general.alignment")) {
        auto al = a->as_int(1, static_cast<int64_t>(k_max_alignment));
        if (!al || (*al & (*al - 1)) != 0) return p.bad("general.alignment must be a power of two integer up to 2^20");
        alignment_ = static_cast<size_t>(*al);
    }

    SKIPPY_TRY(p.charge(n_tensors, sizeof(tensor_info), "tensor count " + std::to_string(n_tensors)));
    tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        tensor_info t;
        SKIPPY_TRY(p.read_string(t.name, "tensor name"));
        uint32_t n_dims = 0;
        if (!r.get_u32(n_dims)) return p.truncated("tensor dimension count");
        if (n_dims == 0 || n_dims > k_max_dims) {
            return p.bad("tensor " + quoted(t.name) + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
        }
        int64_t n_elems = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t dim = 0;
            if (!r.get_u64(dim)) return p.truncated("tensor dimension");
            if (dim == 0 || dim > static_cast<uint64_t>(INT64_MAX) ||
                static_cast<int64_t>(dim) > INT64_MAX / n_elems) {
                return p.bad("tensor " + quoted(t.name) + " has an invalid dimension " + std::to_string(dim));
            }
            n_elems *= static_cast<int64_t>(dim);
            t.dims.push_back(static_cast<int64_t>(dim));
        }
        uint32_t raw_type = 0;
        if (!r.get_u32(raw_type)) return p.truncated("tensor type");
        auto traits = get_tensor_type_traits(raw_type);
        if (!traits) return p.bad("tensor " + quoted(t.name) + " has unknown type " + std::to_string(raw_type));
        t.type = static_cast<tensor_type>(raw_type);
        if (t.dims[0] % traits->block_elems != 0) {
            return p.bad("tensor " + quoted(t.name) + " row length " + std::to_string(t.dims[0]) +
                         " is not a multiple of the " + std::string(traits->name) + " block size");
        }
        const uint64_t n_blocks = static_cast<uint64_t>(n_elems / traits->block_elems);
        if (n_blocks > static_cast<uint64_t>(SIZE_MAX) / traits->block_bytes) return p.bad("tensor " + quoted(t.name) + " is too large");
        t.n_bytes = static_cast<size_t>(n_blocks) * traits->block_bytes;
        if (!r.get_u64(t.offset)) return p.truncated("tensor offset");
        if (t.offset % alignment_ != 0) {
            return p.bad("tensor " + quoted(t.name) + " offset " + std::to_string(t.offset) + " is not aligned to " +
                         std::to_string(alignment_));
        }
        if (tensor_index_.count(t.name)) return p.bad("duplicate tensor name " + quoted(t.name));
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    const size_t infos_end = r.offset();
    data_offset_ = (infos_end + alignment_ - 1) / alignment_ * alignment_;
    if (!tensors_.empty()) {
        if (data_offset_ > size_) return p.bad("data section starts past the end of the file");
        const uint64_t data_bytes = size_ - data_offset_;
        for (auto & t : tensors_) {
            if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
                return make_error(error_code::invalid_data,
                                  "gguf: tensor " + quoted(t.name) + " data [" + std::to_string(t.offset) + ", +" +
                                      std::to_string(t.n_bytes) + ") lies outside the data section of " +
                                      std::to_string(data_bytes) + " bytes");
            }
            t.data = base_ + data_offset_ + t.offset;
        }
    }
    return status::ok();
}

const value * file::find(std::string_view key) const {
    auto it = metadata_index_.find(key);
    return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<std::string> file::get_string(std::string_view key) const {
    const value * v = find(key);
    if (!v || !v->as_string()) return std::nullopt;
    return *v->as_string();
}

std::optional<int64_t> file::get_int(std::string_view key) const {
    const value * v = find(key);
    return v ? v->as_int() : std::nullopt;
}

std::optional<double> file::get_float(std::string_view key) const {
    const value * v = find(key);
    return v ? v->as_float() : std::nullopt;
}

std::optional<bool> file::get_bool(std::string_view key) const {
    const value * v = find(key);
    return v ? v->as_bool() : std::nullopt;
}

const tensor_info * file::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace skippy::gguf
