#include "cache/disk_tier.h"

#include "base/byte_io.h"
#include "base/log.h"
#include "cache/page_record.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace skippy::cache {
namespace {

namespace fs = std::filesystem;

constexpr char k_manifest_magic[8] = {'S', 'K', 'P', 'Y', 'D', 'E', 'N', 'T'};
constexpr size_t k_manifest_head_bytes = 56;
constexpr size_t k_manifest_page_bytes = 56;
constexpr size_t k_max_quarantined = 8;  // newest kept for inspection, older deleted
constexpr const char * k_page_ext = ".page";
constexpr const char * k_entry_ext = ".entry";

error_code code_of_errno(int e) {
    switch (e) {
        case ENOSPC:
        case EDQUOT: return error_code::unavailable;  // full: a refusal, not a broken disk
        case EACCES:
        case EPERM:
        case EROFS: return error_code::permission;
        case ENOENT: return error_code::not_found;
        default: return error_code::io;
    }
}

status errno_error(const std::string & what, int e) {
    return make_error(code_of_errno(e), what + ": " + std::strerror(e));
}

int64_t manifest_size(size_t n_tokens, size_t n_pages) {
    return static_cast<int64_t>(k_manifest_head_bytes + 4 * n_tokens + k_manifest_page_bytes * n_pages + 32);
}

bool parse_hex_key(std::string_view name, std::string_view ext, digest256 & out) {
    if (name.size() != 64 + ext.size() || name.substr(64) != ext) return false;
    for (size_t i = 0; i < 32; ++i) {
        auto nib = [](char c) -> int {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            return -1;
        };
        const int hi = nib(name[2 * i]), lo = nib(name[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out.bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
    }
    return true;
}

status fsync_dir(const std::string & dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_error("open " + dir, errno);
    const int rc = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    return rc == 0 ? status::ok() : errno_error("fsync " + dir, e);
}

result<std::vector<uint8_t>> read_small_file(const std::string & path, int64_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error("open " + path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        return errno_error("stat " + path, e);
    }
    if (st.st_size < 0 || st.st_size > max_bytes) {
        ::close(fd);
        return make_error(error_code::invalid_data, path + ": unexpected size " + std::to_string(st.st_size));
    }
    std::vector<uint8_t> buf(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < buf.size()) {
        const ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int e = n < 0 ? errno : EIO;
            ::close(fd);
            return errno_error("read " + path, e);
        }
        got += static_cast<size_t>(n);
    }
    ::close(fd);
    return buf;
}

bool read_exact(int fd, uint8_t * p, size_t n) {
    while (n > 0) {
        const ssize_t r = ::read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

// The entries of a directory, never throwing: an error ends the listing.
std::vector<fs::path> list_dir(const std::string & dir, std::error_code & ec) {
    std::vector<fs::path> out;
    fs::directory_iterator it(dir, ec), end;
    while (!ec && it != end) {
        out.push_back(it->path());
        it.increment(ec);
    }
    return out;
}

int64_t file_size_or(const fs::path & p, int64_t fallback) {
    std::error_code ec;
    const auto n = fs::file_size(p, ec);
    return ec ? fallback : static_cast<int64_t>(n);
}

}  // namespace

// ---------------------------------------------------------------------------------
// Manifest encoding

std::vector<uint8_t> encode_disk_manifest(const disk_manifest & m) {
    std::vector<uint8_t> out;
    out.reserve(static_cast<size_t>(manifest_size(m.tokens.size(), m.pages.size())));
    byte_writer w(out);
    w.put_bytes(k_manifest_magic, sizeof(k_manifest_magic));
    w.put_u16(disk_manifest_version);
    w.put_u16(0);
    w.put_u32(static_cast<uint32_t>(m.pages.size()));
    w.put_bytes(m.ns.bytes.data(), 32);
    w.put_i64(static_cast<int64_t>(m.tokens.size()));
    for (token_id t : m.tokens) w.put_i32(t);
    for (const disk_manifest::page & p : m.pages) {
        w.put_i64(p.token_start);
        w.put_i64(p.token_count);
        w.put_u64(static_cast<uint64_t>(p.file_bytes));
        w.put_bytes(p.key.bytes.data(), 32);
    }
    const digest256 sum = sha256(out);
    w.put_bytes(sum.bytes.data(), 32);
    return out;
}

result<disk_manifest> decode_disk_manifest(std::span<const uint8_t> bytes) {
    auto bad = [](const std::string & what) { return make_error(error_code::invalid_data, "disk manifest: " + what); };
    if (bytes.size() < k_manifest_head_bytes + 32) return bad("too short");
    if (std::memcmp(bytes.data(), k_manifest_magic, sizeof(k_manifest_magic)) != 0) return bad("bad magic");
    byte_reader r(bytes.subspan(8));
    uint16_t version = 0, reserved = 0;
    uint32_t n_pages = 0;
    int64_t n_tokens = 0;
    std::span<const uint8_t> ns;
    r.get_u16(version);
    r.get_u16(reserved);
    r.get_u32(n_pages);
    r.get_span(32, ns);
    r.get_i64(n_tokens);
    if (!r.ok()) return bad("truncated header");
    if (version != disk_manifest_version) return make_error(error_code::unsupported, "disk manifest: version " + std::to_string(version));
    if (reserved != 0) return bad("reserved bytes set");
    if (n_tokens < 1 || n_tokens > page_record_max_tokens) return bad("token count out of bounds");
    if (n_pages < 1 || n_pages > static_cast<uint64_t>(n_tokens)) return bad("page count out of bounds");
    if (static_cast<int64_t>(bytes.size()) != manifest_size(static_cast<size_t>(n_tokens), n_pages)) return bad("length mismatch");
    const size_t body = bytes.size() - 32;
    const digest256 sum = sha256(bytes.first(body));
    if (std::memcmp(sum.bytes.data(), bytes.data() + body, 32) != 0) {
        return make_error(error_code::integrity, "disk manifest checksum mismatch");
    }
    disk_manifest m;
    std::memcpy(m.ns.bytes.data(), ns.data(), 32);
    m.tokens.resize(static_cast<size_t>(n_tokens));
    for (token_id & t : m.tokens) r.get_i32(t);
    int64_t next = 0;
    for (uint32_t i = 0; i < n_pages; ++i) {
        disk_manifest::page p;
        uint64_t file_bytes = 0;
        std::span<const uint8_t> key;
        r.get_i64(p.token_start);
        r.get_i64(p.token_count);
        r.get_u64(file_bytes);
        r.get_span(32, key);
        if (!r.ok()) return bad("truncated pages");
        if (p.token_start != next || p.token_count < 1 || p.token_count > n_tokens - next) return bad("pages not contiguous from 0");
        if (file_bytes <= page_record_overhead_bytes || file_bytes > page_record_overhead_bytes + page_record_max_payload_bytes) {
            return bad("page file size out of bounds");
        }
        p.file_bytes = static_cast<int64_t>(file_bytes);
        std::memcpy(p.key.bytes.data(), key.data(), 32);
        next += p.token_count;
        m.pages.push_back(p);
    }
    if (next != n_tokens) return bad("pages do not cover the tokens");
    return m;
}

// ---------------------------------------------------------------------------------
// Opening and recovery

disk_tier::disk_tier(const disk_tier_config & config) : config_(config) {}

disk_tier::~disk_tier() {
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string disk_tier::page_path(const digest256 & key) const { return config_.dir + "/pages/" + key.hex() + k_page_ext; }
std::string disk_tier::entry_path(const digest256 & key) const { return config_.dir + "/entries/" + key.hex() + k_entry_ext; }

result<std::unique_ptr<disk_tier>> disk_tier::open(const disk_tier_config & config) {
    if (config.dir.empty()) return make_error(error_code::invalid_argument, "disk tier without a directory");
    if (config.page_tokens < 1) return make_error(error_code::invalid_argument, "disk tier page_tokens must be >= 1");
    if (config.max_bytes < 0) return make_error(error_code::invalid_argument, "disk tier max_bytes must be >= 0");
    std::unique_ptr<disk_tier> t(new disk_tier(config));
    std::error_code ec;
    for (const char * sub : {"", "/pages", "/entries", "/tmp", "/quarantine"}) {
        fs::create_directories(config.dir + sub, ec);
        if (ec) return make_error(code_of_errno(ec.value()), "kv cache directory " + config.dir + sub + ": " + ec.message());
    }
    const std::string lock_path = config.dir + "/LOCK";
    t->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (t->lock_fd_ < 0) return errno_error("kv cache directory lock " + lock_path, errno);
    if (::flock(t->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        char pid[32] = {};
        (void)::pread(t->lock_fd_, pid, sizeof(pid) - 1, 0);
        std::string owner(pid);
        while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
        if (e == EWOULDBLOCK) {
            return make_error(error_code::unavailable, "kv cache directory " + config.dir + " is in use by another process" +
                                                           (owner.empty() ? std::string() : " (pid " + owner + ")") +
                                                           "; give each process its own --kv-cache-disk directory");
        }
        return errno_error("lock " + lock_path, e);
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(t->lock_fd_, 0) == 0) (void)::pwrite(t->lock_fd_, pid.data(), pid.size(), 0);

    if (t->config_.max_bytes == 0) {
        struct statvfs sv {};
        int64_t tenth = disk_default_max_bytes;
        if (::statvfs(config.dir.c_str(), &sv) == 0) {
            tenth = static_cast<int64_t>(static_cast<long double>(sv.f_blocks) * sv.f_frsize / 10);
        }
        t->config_.max_bytes = std::min(disk_default_max_bytes, std::max<int64_t>(tenth, 1));
    }
    SKIPPY_TRY(t->recover());
    return t;
}

status disk_tier::recover() {
    std::error_code ec;
    const std::string format_path = config_.dir + "/FORMAT";
    if (fs::exists(format_path, ec)) {
        SKIPPY_ASSIGN_OR_RETURN(std::vector<uint8_t> text, read_small_file(format_path, 4096));
        if (std::string_view(reinterpret_cast<const char *>(text.data()), text.size()) != disk_format_text) {
            return make_error(error_code::unsupported, "kv cache directory " + config_.dir + " has another format (FORMAT: " +
                                                           std::string(text.begin(), text.end()) + ")");
        }
    } else {
        int64_t unused = 0;
        const std::span<const uint8_t> body(reinterpret_cast<const uint8_t *>(disk_format_text.data()), disk_format_text.size());
        const std::span<const uint8_t> parts[] = {body};
        SKIPPY_TRY(write_file(format_path, parts, unused));
    }
    fixed_bytes_ = static_cast<int64_t>(disk_format_text.size()) + file_size_or(config_.dir + "/LOCK", 0);

    // Writes a crash interrupted.
    for (const fs::path & e : list_dir(config_.dir + "/tmp", ec)) {
        std::error_code rm;
        fs::remove(e, rm);
        ++counts_.n_orphans_removed;
    }
    // Quarantine: kept, counted, trimmed to the newest few.
    std::vector<std::pair<fs::file_time_type, fs::path>> q;
    for (const fs::path & e : list_dir(config_.dir + "/quarantine", ec)) {
        std::error_code t;
        q.emplace_back(fs::last_write_time(e, t), e);
    }
    std::sort(q.begin(), q.end());
    for (const auto & [when, path] : q) quarantine_.emplace_back(path.string(), file_size_or(path, 0));
    for (const auto & [path, bytes] : quarantine_) quarantine_bytes_ += bytes;

    // Manifests, oldest first (their order of use is their order of recency).
    std::vector<std::pair<fs::file_time_type, fs::path>> manifests;
    for (const fs::path & e : list_dir(config_.dir + "/entries", ec)) {
        std::error_code t;
        manifests.emplace_back(fs::last_write_time(e, t), e);
    }
    std::sort(manifests.begin(), manifests.end());
    for (const auto & [when, path] : manifests) {
        const std::string name = path.filename().string();
        digest256 key;
        auto bytes = read_small_file(path.string(), manifest_size(static_cast<size_t>(page_record_max_tokens),
                                                                static_cast<size_t>(page_record_max_tokens / config_.page_tokens + 1)));
        if (!parse_hex_key(name, k_entry_ext, key) || !bytes.is_ok()) {
            quarantine_locked(path.string(), name, file_size_or(path, 0));
            continue;
        }
        auto m = decode_disk_manifest(*bytes);
        if (!m.is_ok() || m->pages.back().key != key) {
            quarantine_locked(path.string(), name, static_cast<int64_t>(bytes->size()));
            continue;
        }
        // Cut at another page size (a changed configuration): not servable.
        bool usable = true;
        for (size_t i = 0; i + 1 < m->pages.size(); ++i) {
            if (m->pages[i].token_count != config_.page_tokens) usable = false;
        }
        if (m->pages.back().token_count > config_.page_tokens) usable = false;
        for (const disk_manifest::page & p : m->pages) {
            if (!usable) break;
            if (file_size_or(page_path(p.key), -1) != p.file_bytes) usable = false;  // missing or torn
        }
        if (!usable) {
            std::error_code rm;
            fs::remove(path, rm);
            ++counts_.n_dropped_entries;
            continue;
        }
        insert_result ir = index_.insert(m->ns, m->tokens, entry_kind::disk);
        if (!ir.inserted) {  // two manifests for one prompt cannot be named alike; keep the first
            std::error_code rm;
            fs::remove(path, rm);
            ++counts_.n_dropped_entries;
            continue;
        }
        entry_rec e;
        e.ns = m->ns;
        e.key = key;
        e.manifest_bytes = static_cast<int64_t>(bytes->size());
        for (const disk_manifest::page & p : m->pages) {
            e.pages.push_back(page_ref{p.key, p.token_start, p.token_count, p.file_bytes});
            page_rec & pr = pages_[p.key];
            if (pr.refs++ == 0) {
                pr.bytes = p.file_bytes;
                page_bytes_ += p.file_bytes;
            }
        }
        manifest_bytes_ += e.manifest_bytes;
        entries_.emplace(ir.id, std::move(e));
        ++counts_.n_recovered_entries;
    }
    // Pages no manifest lists: a crash between a prompt's pages and its manifest.
    for (const fs::path & e : list_dir(config_.dir + "/pages", ec)) {
        digest256 key;
        if (parse_hex_key(e.filename().string(), k_page_ext, key) && pages_.count(key)) continue;
        std::error_code rm;
        fs::remove(e, rm);
        ++counts_.n_orphans_removed;
    }
    if (ec) return make_error(code_of_errno(ec.value()), "kv cache directory " + config_.dir + ": " + ec.message());
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t n_evicted = 0;
    (void)make_room_locked(0, n_evicted);  // a smaller bound than last time
    if (counts_.n_recovered_entries > 0 || counts_.n_dropped_entries > 0 || counts_.n_orphans_removed > 0) {
        SKIPPY_LOG_INFO("kv cache disk %s: %lld entries, %lld pages, %.1f MiB of %.1f MiB (dropped %lld entries, %lld stray files)",
                        config_.dir.c_str(), static_cast<long long>(entries_.size()), static_cast<long long>(pages_.size()),
                        static_cast<double>(used_bytes_locked()) / (1 << 20), static_cast<double>(config_.max_bytes) / (1 << 20),
                        static_cast<long long>(counts_.n_dropped_entries), static_cast<long long>(counts_.n_orphans_removed));
    }
    return status::ok();
}

// ---------------------------------------------------------------------------------
// Bookkeeping (under the lock)

int64_t disk_tier::used_bytes_locked() const {
    return fixed_bytes_ + page_bytes_ + manifest_bytes_ + quarantine_bytes_ + reserved_bytes_;
}

void disk_tier::release_page_locked(const digest256 & key) {
    auto it = pages_.find(key);
    if (it == pages_.end()) return;
    if (--it->second.refs > 0) return;
    if (!it->second.gone) {
        std::error_code ec;
        fs::remove(page_path(key), ec);
        page_bytes_ -= it->second.bytes;
    }
    pages_.erase(it);
}

void disk_tier::drop_entry_locked(entry_id id, bool evicted) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    if (!index_.remove(id, evicted ? removal_reason::evicted : removal_reason::dropped).is_ok()) return;  // in use
    std::error_code ec;
    fs::remove(entry_path(it->second.key), ec);
    manifest_bytes_ -= it->second.manifest_bytes;
    for (const page_ref & p : it->second.pages) release_page_locked(p.key);
    entries_.erase(it);
    if (evicted) ++counts_.n_evictions;
}

void disk_tier::drop_entries_with_page_locked(const digest256 & key) {
    std::vector<entry_id> ids;
    for (const auto & [id, e] : entries_) {
        for (const page_ref & p : e.pages) {
            if (p.key == key) {
                ids.push_back(id);
                break;
            }
        }
    }
    for (entry_id id : ids) drop_entry_locked(id, false);
}

void disk_tier::quarantine_locked(const std::string & path, const std::string & name, int64_t bytes) {
    const std::string dest = config_.dir + "/quarantine/" + name + "." + std::to_string(::getpid()) + "." + std::to_string(n_tmp_++);
    std::error_code ec;
    fs::rename(path, dest, ec);
    if (ec) {
        fs::remove(path, ec);
        return;
    }
    quarantine_.emplace_back(dest, bytes);
    quarantine_bytes_ += bytes;
    ++counts_.n_quarantines;
    while (quarantine_.size() > k_max_quarantined) {
        fs::remove(quarantine_.front().first, ec);
        quarantine_bytes_ -= quarantine_.front().second;
        quarantine_.erase(quarantine_.begin());
    }
}

bool disk_tier::make_room_locked(int64_t bytes, int64_t & n_evicted) {
    while (used_bytes_locked() + bytes > config_.max_bytes) {
        if (!quarantine_.empty()) {  // inspection copies go first
            std::error_code ec;
            fs::remove(quarantine_.front().first, ec);
            quarantine_bytes_ -= quarantine_.front().second;
            quarantine_.erase(quarantine_.begin());
            continue;
        }
        const entry_id victim = index_.next_victim(entry_kind::disk);
        if (victim == no_entry) return false;
        drop_entry_locked(victim, true);
        ++n_evicted;
    }
    return true;
}

// ---------------------------------------------------------------------------------
// Files

status disk_tier::write_file(const std::string & final_path, std::span<const std::span<const uint8_t>> parts, int64_t & n_written) {
    uint64_t serial = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        serial = n_tmp_++;
    }
    const std::string tmp = config_.dir + "/tmp/" + fs::path(final_path).filename().string() + "." +
                            std::to_string(::getpid()) + "." + std::to_string(serial) + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno_error("create " + tmp, errno);
    auto fail = [&](const status & st) {
        ::close(fd);
        ::unlink(tmp.c_str());
        return st;
    };
    int64_t offset = 0;
    for (std::span<const uint8_t> part : parts) {
        size_t done = 0;
        while (done < part.size()) {
            const size_t n = std::min<size_t>(part.size() - done, size_t{1} << 22);
            if (config_.fault) {
                const error_code c = config_.fault(tmp, offset, static_cast<int64_t>(n));
                if (c != error_code::ok) return fail(make_error(c, "write " + tmp + ": injected failure"));
            }
            const ssize_t w = ::write(fd, part.data() + done, n);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return fail(errno_error("write " + tmp, w < 0 ? errno : EIO));
            done += static_cast<size_t>(w);
            offset += w;
        }
    }
    if (::fsync(fd) != 0) return fail(errno_error("fsync " + tmp, errno));
    if (::close(fd) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        return errno_error("close " + tmp, e);
    }
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        return errno_error("rename " + tmp, e);
    }
    n_written += offset;
    return status::ok();
}

// ---------------------------------------------------------------------------------
// Lookups

int64_t disk_tier::restorable_end_locked(const digest256 & ns, std::span<const token_id> tokens, int64_t & matched,
                                          entry_id * serving) const {
    const match_result m = index_.peek(ns, tokens, entry_kind::disk);
    matched = m.matched_tokens;
    if (serving) *serving = m.id;
    // The entry serving the match holds pages covering all its tokens, and the KV of a
    // token depends only on the tokens before it: its pages through the one holding the
    // last shared token, the last cut on import, restore the whole shared prefix.
    if (m.id == no_entry || !entries_.contains(m.id)) return 0;
    return m.matched_tokens;
}

tier_peek_result disk_tier::peek(const tier_peek_request & req) {
    std::lock_guard<std::mutex> lock(mutex_);
    tier_peek_result r;
    const int64_t end = restorable_end_locked(req.ns.hash, req.tokens, r.matched_tokens);
    r.restorable_tokens = std::min(end, req.target);
    return r;
}

bool disk_tier::holds(const digest256 & ns, std::span<const token_id> tokens) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !tokens.empty() && index_.peek_checkpoint(ns, tokens, entry_kind::disk).matched_tokens == static_cast<int64_t>(tokens.size());
}

tier_restore_result disk_tier::restore(const tier_restore_request & req) {
    tier_restore_result r;
    const int64_t n = req.n_tokens;
    std::vector<page_ref> plan;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        int64_t matched = 0;
        entry_id serving = no_entry;
        const int64_t end = restorable_end_locked(req.ns.hash, req.tokens, matched, &serving);
        if (n <= 0 || end < n) {
            r.error = error_code::not_found;
            return r;
        }
        // The serving entry's pages through the one covering token n - 1. Those before
        // the last hold only shared tokens (their keys are the query's prefix hashes); the
        // last may run past n, and the importer keeps [0, n).
        for (const page_ref & p : entries_.at(serving).pages) {
            if (p.token_start >= n) break;
            auto it = pages_.find(p.key);
            if (it == pages_.end() || it->second.gone) {
                for (const page_ref & q : plan) release_page_locked(q.key);
                r.error = error_code::not_found;
                ++counts_.n_read_failures;
                return r;
            }
            ++it->second.refs;  // pinned while read
            plan.push_back(p);
        }
        // Recency: the entry that served the match.
        (void)index_.lookup(req.ns.hash, req.tokens, entry_kind::disk);
    }
    std::vector<page_bytes> pages;
    error_code failed = error_code::ok;
    size_t bad = plan.size();
    for (size_t i = 0; i < plan.size() && failed == error_code::ok; ++i) {
        const page_ref & p = plan[i];
        const std::string path = page_path(p.key);
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            failed = code_of_errno(errno);
            bad = i;
            break;
        }
        struct stat st {};
        uint8_t header[page_record_header_bytes];
        uint8_t trailer[32];
        page_bytes out;
        out.token_start = p.token_start;
        out.token_count = p.token_count;
        status verdict;
        if (::fstat(fd, &st) != 0 || st.st_size != p.file_bytes || !read_exact(fd, header, sizeof(header))) {
            verdict = make_error(error_code::invalid_data, "page file truncated");
        } else if (auto h = decode_page_record_header(header, static_cast<uint64_t>(st.st_size)); !h.is_ok()) {
            verdict = h.error();
        } else if (h->ns != req.ns.hash || h->key != p.key || h->token_start != p.token_start || h->token_count != p.token_count) {
            verdict = make_error(error_code::invalid_data, "page file of another prefix");
        } else {
            out.bytes.resize(static_cast<size_t>(h->payload_bytes));
            if (!read_exact(fd, out.bytes.data(), out.bytes.size()) || !read_exact(fd, trailer, sizeof(trailer))) {
                verdict = make_error(error_code::invalid_data, "page file truncated");
            } else {
                sha256_hasher hs;
                hs.update(header);
                hs.update(out.bytes);
                if (hs.finish().bytes != std::to_array(trailer)) verdict = make_error(error_code::integrity, "page file checksum");
            }
        }
        ::close(fd);
        if (!verdict.is_ok()) {
            failed = verdict.code();
            bad = i;
            break;
        }
        pages.push_back(std::move(out));
    }
    status imported;
    if (failed == error_code::ok) imported = req.importer->import(req.session, pages, n);

    std::lock_guard<std::mutex> lock(mutex_);
    if (failed != error_code::ok || !imported.is_ok()) {
        ++counts_.n_read_failures;
        r.error = failed != error_code::ok ? failed : imported.code();
        std::vector<digest256> suspects;
        if (failed != error_code::ok) {
            suspects.push_back(plan[bad].key);
        } else if (is_validation_error(imported.code())) {
            for (const page_ref & p : plan) suspects.push_back(p.key);  // the backend refused one of them
        }
        for (const digest256 & key : suspects) {
            auto it = pages_.find(key);
            if (it == pages_.end() || it->second.gone) continue;
            if (is_validation_error(r.error)) {
                quarantine_locked(page_path(key), key.hex() + k_page_ext, it->second.bytes);
                page_bytes_ -= it->second.bytes;
                it->second.gone = true;
                r.quarantined = true;
            }
            drop_entries_with_page_locked(key);  // never served again
        }
    } else {
        r.imported_pages = static_cast<int64_t>(pages.size());
        ++counts_.n_restores;
    }
    for (const page_ref & p : plan) release_page_locked(p.key);
    return r;
}

// ---------------------------------------------------------------------------------
// Records

tier_record_result disk_tier::record(const tier_record_request & req) {
    tier_record_result r;
    r.state = holds(req.ns.hash, req.tokens) ? tier_record_state::covered : tier_record_state::wants_pages;
    return r;
}

tier_store_result disk_tier::store(const tier_store_request & req) {
    tier_store_result r;
    const size_t n = req.tokens.size();
    if (n == 0 || req.pages.empty()) {
        r.error = error_code::invalid_argument;
        return r;
    }
    // Page keys and records outside the lock (hashing).
    std::vector<page_ref> refs;
    int64_t next = 0;
    for (const page_bytes & p : req.pages) {
        if (p.token_start != next || p.token_count <= 0 || p.bytes.empty() ||
            (p.token_count != config_.page_tokens && p.token_start + p.token_count != static_cast<int64_t>(n))) {
            r.error = error_code::invalid_argument;  // cut at another page size
            return r;
        }
        next += p.token_count;
        page_ref ref;
        ref.key = prefix_hash(req.ns, req.tokens.first(static_cast<size_t>(next)));
        ref.token_start = p.token_start;
        ref.token_count = p.token_count;
        ref.file_bytes = static_cast<int64_t>(page_record_overhead_bytes + p.bytes.size());
        refs.push_back(ref);
    }
    if (next != static_cast<int64_t>(n)) {
        r.error = error_code::invalid_argument;
        return r;
    }
    const int64_t manifest_bytes = manifest_size(n, refs.size());

    std::vector<size_t> to_write;  // indexes of pages not on disk
    int64_t reserve = manifest_bytes;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (index_.peek_checkpoint(req.ns.hash, req.tokens, entry_kind::disk).matched_tokens == static_cast<int64_t>(n)) {
            r.state = tier_store_state::present;
            return r;
        }
        for (size_t i = 0; i < refs.size(); ++i) {
            auto it = pages_.find(refs[i].key);
            if (it == pages_.end() || it->second.gone) {
                to_write.push_back(i);
                reserve += refs[i].file_bytes;
            }
        }
        auto refuse = [&](const char * why) {
            r.state = tier_store_state::refused;
            r.error = error_code::unavailable;
            ++counts_.n_refused;
            (void)why;
            return r;
        };
        if (fixed_bytes_ + reserve > config_.max_bytes) return refuse("larger than the bound");
        // Pin the shared pages first: eviction must not take what this entry reuses.
        for (size_t i = 0; i < refs.size(); ++i) {
            if (std::find(to_write.begin(), to_write.end(), i) == to_write.end()) ++pages_[refs[i].key].refs;
        }
        if (!make_room_locked(reserve, r.n_evicted)) {
            for (size_t i = 0; i < refs.size(); ++i) {
                if (std::find(to_write.begin(), to_write.end(), i) == to_write.end()) release_page_locked(refs[i].key);
            }
            return refuse("entries in use hold the room");
        }
        reserved_bytes_ += reserve;
    }

    std::vector<size_t> written;
    status st;
    for (size_t i : to_write) {
        const page_bytes & p = req.pages[i];
        page_record_header h;
        h.ns = req.ns.hash;
        h.key = refs[i].key;
        h.token_start = p.token_start;
        h.token_count = p.token_count;
        h.payload_bytes = p.bytes.size();
        // Header and trailer around the payload, without copying it.
        const std::vector<uint8_t> head = encode_page_record_header(h);
        sha256_hasher hs;
        hs.update(head);
        hs.update(p.bytes);
        const digest256 sum = hs.finish();
        const std::span<const uint8_t> parts[] = {head, p.bytes, sum.bytes};
        st = write_file(page_path(refs[i].key), parts, r.bytes_written);
        if (!st.is_ok()) break;
        written.push_back(i);
    }
    if (st.is_ok()) st = fsync_dir(config_.dir + "/pages");
    disk_manifest m;
    if (st.is_ok()) {
        m.ns = req.ns.hash;
        m.tokens.assign(req.tokens.begin(), req.tokens.end());
        for (const page_ref & p : refs) m.pages.push_back(disk_manifest::page{p.token_start, p.token_count, p.file_bytes, p.key});
        const std::vector<uint8_t> bytes = encode_disk_manifest(m);
        const std::span<const uint8_t> parts[] = {bytes};
        st = write_file(entry_path(refs.back().key), parts, r.bytes_written);
        if (st.is_ok()) st = fsync_dir(config_.dir + "/entries");
    }

    std::lock_guard<std::mutex> lock(mutex_);
    reserved_bytes_ -= reserve;
    if (!st.is_ok()) {
        // Nothing partial stays: pages written for this entry alone go again.
        for (size_t i : written) {
            if (!pages_.count(refs[i].key)) {
                std::error_code ec;
                fs::remove(page_path(refs[i].key), ec);
            }
        }
        for (size_t i = 0; i < refs.size(); ++i) {
            if (std::find(to_write.begin(), to_write.end(), i) == to_write.end()) release_page_locked(refs[i].key);
        }
        std::error_code ec;
        fs::remove(entry_path(refs.back().key), ec);
        ++counts_.n_write_failures;
        r.state = st.code() == error_code::unavailable ? tier_store_state::refused : tier_store_state::error;
        r.error = st.code();
        r.bytes_written = 0;
        return r;
    }
    insert_result ir = index_.insert(req.ns.hash, req.tokens, entry_kind::disk);
    entry_rec e;
    e.ns = req.ns.hash;
    e.key = refs.back().key;
    e.manifest_bytes = manifest_bytes;
    e.pages = refs;
    for (size_t i : to_write) {
        page_rec & pr = pages_[refs[i].key];
        pr.refs = 1;
        pr.bytes = refs[i].file_bytes;
        pr.gone = false;
        page_bytes_ += pr.bytes;
    }
    manifest_bytes_ += manifest_bytes;
    entries_.emplace(ir.id, std::move(e));
    r.state = tier_store_state::stored;
    r.n_pages_written = static_cast<int64_t>(to_write.size());
    ++counts_.n_stores;
    counts_.n_pages_written += r.n_pages_written;
    counts_.n_bytes_written += r.bytes_written;
    return r;
}

tier_evict_result disk_tier::evict(const tier_evict_request &) {
    return tier_evict_result{};  // bounded by its own byte limit, holds no pool blocks
}

// ---------------------------------------------------------------------------------
// Stats

disk_tier_stats disk_tier::disk_stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    disk_tier_stats s = counts_;
    s.n_entries = static_cast<int64_t>(entries_.size());
    s.n_pages = static_cast<int64_t>(pages_.size());
    s.bytes = used_bytes_locked();
    s.max_bytes = config_.max_bytes;
    s.quarantine_bytes = quarantine_bytes_;
    return s;
}

tier_stats disk_tier::stats() const {
    const disk_tier_stats s = disk_stats();
    tier_stats t;
    t.errors = s.n_read_failures + s.n_write_failures;
    t.evictions = s.n_evictions;
    t.entries = s.n_entries;
    t.bytes = s.bytes;
    return t;
}

status disk_tier::check_invariants() const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto broken = [](const char * what) { return make_error(error_code::internal, std::string("disk invariant: ") + what); };
    if (index_.n_entries(entry_kind::disk) != static_cast<int64_t>(entries_.size())) return broken("index and entries disagree");
    SKIPPY_TRY(index_.check_invariants());
    std::unordered_map<digest256, int64_t, digest256_hash> refs;
    int64_t manifests = 0;
    for (const auto & [id, e] : entries_) {
        const entry_info * info = index_.find(id);
        if (!info) return broken("entry missing from the index");
        manifests += e.manifest_bytes;
        int64_t next = 0;
        for (const page_ref & p : e.pages) {
            if (p.token_start != next) return broken("page gap");
            next += p.token_count;
            ++refs[p.key];
        }
        if (next != info->n_tokens) return broken("pages vs tokens");
    }
    if (manifests != manifest_bytes_) return broken("manifest bytes");
    int64_t pages = 0;
    for (const auto & [key, pr] : pages_) {
        if (pr.gone) continue;
        auto it = refs.find(key);
        if (it == refs.end() || it->second != pr.refs) return broken("page references");
        pages += pr.bytes;
    }
    if (pages != page_bytes_) return broken("page bytes");
    if (reserved_bytes_ != 0) return broken("a reservation outlived its write");
    if (used_bytes_locked() > config_.max_bytes) return broken("over the bound");
    return status::ok();
}

}  // namespace skippy::cache
