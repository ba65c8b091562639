#include "http/event_loop.h"

#include "base/log.h"
#include "http/api.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

namespace skippy::http {
namespace {

using clock = std::chrono::steady_clock;

clock::duration seconds(double s) {
    return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s));
}

// epoll user data of the two non-connection descriptors; connection ids start above.
constexpr uint64_t listener_tag = 0;
constexpr uint64_t wake_tag = 1;
constexpr uint64_t first_connection_id = 2;
// A mailbox entry that is no connection: "look at the drain flag".
constexpr uint64_t drain_note = 0;

constexpr size_t read_chunk_bytes = 64 << 10;
// Reads per readiness event on one connection, so that one fast sender cannot keep the
// loop from the others (level-triggered epoll reports the rest next round).
constexpr int max_reads_per_event = 4;
// While a request is being answered, bytes of the next (pipelined) one are read up to
// this much, then reading pauses until the response is written.
constexpr size_t paused_input_bytes = 64 << 10;
// A closed-for-writing connection is drained of input this long before it is closed,
// so that the client reads our last response instead of a reset.
constexpr auto linger = std::chrono::seconds(2);
// Connections lingering at once; beyond, a connection to close is closed at once.
constexpr size_t max_lingering = 1024;
// A head that has been arriving this long counts as slow: it may be shed at the cap.
constexpr auto slow_head_age = std::chrono::seconds(1);
// How long stop() lets queued responses drain.
constexpr auto stop_grace = std::chrono::seconds(2);
constexpr auto sweep_interval = std::chrono::milliseconds(50);
// File descriptors kept free of client connections (model files, stage links, logs).
constexpr rlim_t reserved_fds = 256;

const char * reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 413: return "Content Too Large";
        case 414: return "URI Too Long";
        case 417: return "Expectation Failed";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

// The status line and headers of a response. `content_length` < 0: a stream
// (chunked when `chunked`, else delimited by the close).
std::string response_head(const http_response & r, int64_t content_length, bool chunked, bool close, int version_minor) {
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
    if (!r.content_type.empty()) out += "Content-Type: " + r.content_type + "\r\n";
    for (const auto & [name, value] : r.headers) out += name + ": " + value + "\r\n";
    if (content_length >= 0) {
        out += "Content-Length: " + std::to_string(content_length) + "\r\n";
    } else if (chunked) {
        out += "Transfer-Encoding: chunked\r\n";
    }
    if (close) {
        out += "Connection: close\r\n";
    } else if (version_minor == 0) {
        out += "Connection: keep-alive\r\n";
    }
    out += "\r\n";
    return out;
}

std::string chunk_frame(std::string_view bytes) {
    char size[24];
    std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
    std::string out(size);
    out.append(bytes);
    out += "\r\n";
    return out;
}

// Where channels tell the loop which connections have new bytes to write.
struct mailbox {
    std::mutex            mutex;
    std::vector<uint64_t> ready;
    int                   event_fd = -1;
    bool                  closed = false;
    std::atomic<bool>     draining{false};

    void post(uint64_t id) {
        std::lock_guard<std::mutex> lock(mutex);
        if (closed) return;
        const bool was_empty = ready.empty();
        ready.push_back(id);
        if (was_empty) {
            const uint64_t one = 1;
            if (::write(event_fd, &one, sizeof(one)) < 0) { /* the counter is non-zero already */ }
        }
    }
};

class channel_impl final : public response_channel {
public:
    channel_impl(std::shared_ptr<mailbox> box, uint64_t conn_id, std::string path, const http_request & req,
                 size_t max_output_bytes, const response_observer * observer)
        : box_(std::move(box)), conn_id_(conn_id), path_(std::move(path)), version_minor_(req.version_minor),
          keep_alive_(req.keep_alive), head_only_(req.method == "HEAD"), max_output_bytes_(max_output_bytes),
          observer_(observer) {}

    void respond(http_response r) override {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (answered_ || gone_) return;
            answered_ = true;
            complete = true;
            close_after = !keep_alive_ || box_->draining.load();
            out += response_head(r, static_cast<int64_t>(r.body.size()), false, close_after, version_minor_);
            if (!head_only_) out += r.body;
        }
        observe(r.status);
        box_->post(conn_id_);
    }

    void begin_stream(const http_response & head) override {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (answered_ || gone_) return;
            answered_ = true;
            streaming_ = true;
            chunked_ = version_minor_ >= 1;
            close_after = !keep_alive_ || !chunked_ || box_->draining.load();
            out += response_head(head, -1, chunked_, close_after, version_minor_);
        }
        observe(head.status);
        box_->post(conn_id_);
    }

    bool write(std::string_view bytes) override {
        std::unique_lock<std::mutex> lock(mutex);
        if (!streaming_ || complete || gone_ || aborted_) return false;
        if (bytes.empty()) return true;
        if (chunked_) {
            out += chunk_frame(bytes);
        } else {
            out.append(bytes);
        }
        lock.unlock();
        box_->post(conn_id_);
        lock.lock();
        drained.wait(lock, [&] { return pending() <= max_output_bytes_ || gone_ || aborted_; });
        return !gone_ && !aborted_;
    }

    void end_stream() override {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (!streaming_ || complete) return;
            complete = true;
            if (chunked_ && !gone_) out += "0\r\n\r\n";
        }
        box_->post(conn_id_);
    }

    void abort_stream() override {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (!streaming_ || complete) return;
            complete = true;
            close_after = true;
        }
        box_->post(conn_id_);
    }

    bool gone() const override { return gone_flag_.load(); }

    // --- the loop's side (loop thread; `mutex` held where noted)

    size_t pending() const { return out.size() - out_pos; }  // REQUIRES: mutex held

    void mark_gone() {
        std::lock_guard<std::mutex> lock(mutex);
        gone_ = true;
        gone_flag_ = true;
        out.clear();
        out_pos = 0;
        drained.notify_all();
    }

    void abort_writers() {
        std::lock_guard<std::mutex> lock(mutex);
        aborted_ = true;
        drained.notify_all();
    }

    std::mutex              mutex;
    std::condition_variable drained;
    std::string             out;          // response bytes; [out_pos, size) not yet written
    size_t                  out_pos = 0;
    bool                    complete = false;     // the whole response is in `out`
    bool                    close_after = false;  // close the connection once it is written

private:
    void observe(int status) {
        if (observer_ && *observer_) (*observer_)(path_, status);
    }

    const std::shared_ptr<mailbox> box_;
    const uint64_t                 conn_id_;
    const std::string              path_;
    const int                      version_minor_;
    const bool                     keep_alive_;
    const bool                     head_only_;
    const size_t                   max_output_bytes_;
    const response_observer *      observer_;
    bool                           answered_ = false;
    bool                           streaming_ = false;
    bool                           chunked_ = false;
    bool                           gone_ = false;
    bool                           aborted_ = false;
    std::atomic<bool>              gone_flag_{false};
};

enum class conn_state { reading, dispatched, closing };
// The deadline list a connection is on (each ordered by the time it joined).
enum class timer_list { none, idle, head, body, closing };

struct connection {
    uint64_t          id = 0;
    int               fd = -1;
    conn_state        state = conn_state::reading;
    request_parser    parser;
    std::string       in;  // bytes read and not yet parsed
    std::shared_ptr<channel_impl> channel;  // the request being answered
    timer_list        list = timer_list::none;
    std::list<connection *>::iterator list_pos;
    bool              writing = false;  // on the writing list: output waits for the socket
    std::list<connection *>::iterator writing_pos;
    clock::time_point since;            // when it joined its timer list
    clock::time_point last_write_progress;
    uint32_t          events = 0;       // the epoll mask registered
    bool              peer_eof = false;
    bool              continue_sent = false;

    explicit connection(const http_limits & limits) : parser(limits) {}
};

}  // namespace

http_response error_response(int http_status, std::string message) {
    http_response r;
    r.status = http_status;
    r.body = error_body(error_for_status(http_status, std::move(message)));
    return r;
}

struct event_loop::impl {
    loop_options      opt;
    request_handler   handler;
    response_observer observer;
    std::shared_ptr<mailbox> box = std::make_shared<mailbox>();
    int               listen_fd = -1;
    int               epoll_fd = -1;
    int               reserve_fd = -1;  // given up to accept (and refuse) when out of descriptors
    int32_t           bound_port = -1;
    int32_t           cap = 0;
    std::unordered_map<uint64_t, std::unique_ptr<connection>> conns;
    uint64_t          next_id = first_connection_id;
    std::list<connection *> idle_list, head_list, body_list, closing_list, writing_list;
    std::atomic<int32_t> open_count{0};
    bool              stopping = false;  // loop thread: stop() seen
    clock::time_point stop_deadline;
    clock::time_point next_sweep;
    clock::time_point last_fd_warning;

    std::mutex              run_mutex;
    std::condition_variable run_cv;
    bool                    stop_requested = false;
    bool                    running = false;
    bool                    ran = false;

    impl(loop_options o, request_handler h, response_observer ob)
        : opt(std::move(o)), handler(std::move(h)), observer(std::move(ob)) {}

    ~impl() {
        for (auto & [id, c] : conns) {
            if (c->channel) c->channel->mark_gone();
            ::close(c->fd);
        }
        {
            std::lock_guard<std::mutex> lock(box->mutex);
            box->closed = true;
        }
        for (int fd : {listen_fd, epoll_fd, box->event_fd, reserve_fd}) {
            if (fd >= 0) ::close(fd);
        }
    }

    status bind();
    void run();
    void accept_all();
    void add_connection(int fd, clock::time_point now);
    bool shed_one(clock::time_point now);
    void on_event(connection & c, uint32_t events);
    bool read_input(connection & c);
    void process_input(connection & c);
    void dispatch(connection & c);
    void flush(connection & c);
    void response_done(connection & c, bool close_after);
    void send_and_close(connection & c, const http_response & r, const std::string & path);
    void begin_closing(connection & c);
    void close_conn(connection & c);
    void set_list(connection & c, timer_list l, clock::time_point now);
    void set_writing(connection & c, bool writing, clock::time_point now);
    void update_events(connection & c);
    void process_mailbox();
    void sweep(clock::time_point now);
    int32_t n_active() const { return static_cast<int32_t>(conns.size() - closing_list.size()); }
    connection * find(uint64_t id) {
        auto it = conns.find(id);
        return it == conns.end() ? nullptr : it->second.get();
    }
};

status event_loop::impl::bind() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo * found = nullptr;
    const std::string port_text = std::to_string(opt.port);
    const auto cannot = [&](const std::string & why) {
        return make_error(error_code::unavailable, "cannot listen on " + opt.host + ":" + port_text + " (" + why + ")");
    };
    if (getaddrinfo(opt.host.c_str(), port_text.c_str(), &hints, &found) != 0 || !found) {
        return cannot("not an address of this machine?");
    }
    std::string last_error = "no address";
    for (addrinfo * a = found; a && listen_fd < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
            listen_fd = fd;
        } else {
            last_error = std::strerror(errno);
            ::close(fd);
        }
    }
    freeaddrinfo(found);
    if (listen_fd < 0) return cannot(last_error + "; address in use, or not an address of this machine?");
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    getsockname(listen_fd, reinterpret_cast<sockaddr *>(&addr), &len);
    bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in *>(&addr)->sin_port);

    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    box->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd < 0 || box->event_fd < 0) return make_error(error_code::unavailable, "cannot create the HTTP event loop");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = listener_tag;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
    ev.data.u64 = wake_tag;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, box->event_fd, &ev);
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

    // Every connection (and each lingering one) is a descriptor: make room for them.
    cap = std::max<int32_t>(1, opt.max_connections);
    const rlim_t want = static_cast<rlim_t>(cap) + max_lingering + reserved_fds;
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < want) {
        rlimit raised = lim;
        raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
        if (lim.rlim_cur < want) {
            const rlim_t room = lim.rlim_cur > 2 * reserved_fds ? lim.rlim_cur - 2 * reserved_fds : 16;
            cap = static_cast<int32_t>(std::min<rlim_t>(static_cast<rlim_t>(cap), room));
            SKIPPY_LOG_WARN("open-file limit %llu: at most %d HTTP connections (asked for %d; raise ulimit -n)",
                            static_cast<unsigned long long>(lim.rlim_cur), cap, opt.max_connections);
        }
    }
    return status::ok();
}

void event_loop::impl::set_list(connection & c, timer_list l, clock::time_point now) {
    auto list_of = [&](timer_list t) -> std::list<connection *> * {
        switch (t) {
            case timer_list::idle: return &idle_list;
            case timer_list::head: return &head_list;
            case timer_list::body: return &body_list;
            case timer_list::closing: return &closing_list;
            case timer_list::none: return nullptr;
        }
        return nullptr;
    };
    if (auto * from = list_of(c.list)) from->erase(c.list_pos);
    c.list = l;
    c.since = now;
    if (auto * to = list_of(l)) c.list_pos = to->insert(to->end(), &c);
}

void event_loop::impl::set_writing(connection & c, bool writing, clock::time_point now) {
    if (writing == c.writing) return;
    if (writing) {
        c.writing_pos = writing_list.insert(writing_list.end(), &c);
        c.last_write_progress = now;
    } else {
        writing_list.erase(c.writing_pos);
    }
    c.writing = writing;
}

void event_loop::impl::update_events(connection & c) {
    uint32_t want = 0;
    if (!c.peer_eof) {
        want |= EPOLLRDHUP;
        if (c.state != conn_state::dispatched || c.in.size() < paused_input_bytes) want |= EPOLLIN;
    }
    if (c.writing) want |= EPOLLOUT;
    if (want == c.events) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
    c.events = want;
}

void event_loop::impl::add_connection(int fd, clock::time_point now) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto owned = std::make_unique<connection>(opt.limits);
    connection & c = *owned;
    c.id = next_id++;
    c.fd = fd;
    c.events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c.events;
    ev.data.u64 = c.id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        return;
    }
    conns.emplace(c.id, std::move(owned));
    open_count = static_cast<int32_t>(conns.size());
    set_list(c, timer_list::idle, now);
}

bool event_loop::impl::shed_one(clock::time_point now) {
    if (!idle_list.empty()) {
        close_conn(*idle_list.front());  // it asked nothing: nothing to answer
        return true;
    }
    if (!head_list.empty() && now - head_list.front()->since >= slow_head_age) {
        send_and_close(*head_list.front(),
                       error_response(503, "The server is at its connection limit and closed this slow connection"), "");
        return true;
    }
    return false;
}

void event_loop::impl::accept_all() {
    for (int i = 0; i < 64; ++i) {
        int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        const auto now = clock::now();
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if ((errno == EMFILE || errno == ENFILE) && reserve_fd >= 0) {
                // Out of descriptors: accept with the reserve one and refuse at once, so
                // that the client hears why instead of waiting in the backlog.
                ::close(reserve_fd);
                fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd >= 0) {
                    const http_response r = error_response(503, "The server is out of file descriptors; retry later");
                    const std::string bytes = response_head(r, static_cast<int64_t>(r.body.size()), false, true, 1) + r.body;
                    (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
                    ::close(fd);
                }
                reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (now - last_fd_warning > std::chrono::seconds(10)) {
                    SKIPPY_LOG_WARN("HTTP: out of file descriptors with %zu connections open (raise ulimit -n)", conns.size());
                    last_fd_warning = now;
                }
                continue;
            }
            return;  // EAGAIN: nothing more to accept
        }
        if (stopping) {
            ::close(fd);
            continue;
        }
        if (n_active() >= cap && !shed_one(now)) {
            add_connection(fd, now);
            if (connection * c = find(next_id - 1)) {
                send_and_close(*c, error_response(503, "The server has too many open connections; retry later"), "");
            }
            continue;
        }
        add_connection(fd, now);
    }
}

void event_loop::impl::close_conn(connection & c) {
    if (c.channel) c.channel->mark_gone();
    set_list(c, timer_list::none, clock::now());
    set_writing(c, false, clock::now());
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    conns.erase(c.id);  // destroys c
    open_count = static_cast<int32_t>(conns.size());
}

void event_loop::impl::begin_closing(connection & c) {
    // Nothing to drain when the peer has finished sending (or we are stopping).
    if (closing_list.size() >= max_lingering || stopping || c.peer_eof) return close_conn(c);
    ::shutdown(c.fd, SHUT_WR);
    c.state = conn_state::closing;
    c.channel.reset();
    set_writing(c, false, clock::now());
    set_list(c, timer_list::closing, clock::now());
    update_events(c);
}

void event_loop::impl::send_and_close(connection & c, const http_response & r, const std::string & path) {
    // Errors are small and are sent only when nothing else waits in the socket's
    // buffer, so one non-blocking send normally takes all of it; what does not fit is lost.
    const std::string bytes = response_head(r, static_cast<int64_t>(r.body.size()), false, true, 1) + r.body;
    (void)!::send(c.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (observer) observer(path, r.status);
    begin_closing(c);
}

// Reads what the socket has (bounded per event). False when the connection was closed.
bool event_loop::impl::read_input(connection & c) {
    char buf[read_chunk_bytes];
    for (int i = 0; i < max_reads_per_event; ++i) {
        if (c.state == conn_state::dispatched && c.in.size() >= paused_input_bytes) break;
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (c.state != conn_state::closing) c.in.append(buf, static_cast<size_t>(n));
            if (static_cast<size_t>(n) < sizeof(buf)) break;
            continue;
        }
        if (n == 0) {
            c.peer_eof = true;
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        close_conn(c);
        return false;
    }
    return true;
}

void event_loop::impl::on_event(connection & c, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) return close_conn(c);
    if (events & EPOLLOUT) {
        const uint64_t id = c.id;
        flush(c);
        if (!find(id)) return;
    }
    if (!(events & (EPOLLIN | EPOLLRDHUP))) return;
    if (!read_input(c)) return;
    if (c.state == conn_state::closing) {
        if (c.peer_eof) close_conn(c);
        return;
    }
    if (c.state == conn_state::reading) {
        const uint64_t id = c.id;
        process_input(c);
        if (!find(id)) return;
    }
    // Reading paused and the peer shut down its side, or it closed: it is gone. (A
    // client that only half-closes counts as gone, as docs/http-api.md says.)
    if (c.peer_eof || ((events & EPOLLRDHUP) && !(c.events & EPOLLIN))) {
        bool answered = false;
        if (c.state == conn_state::dispatched && c.channel) {
            std::lock_guard<std::mutex> lock(c.channel->mutex);
            answered = c.channel->complete && c.channel->pending() > 0;
            // The answer is queued already: let it go out, then close.
            if (answered) c.channel->close_after = true;
        }
        if (!answered) return close_conn(c);
        c.peer_eof = true;  // stop watching input: it would report the hang-up again and again
    }
    update_events(c);
}

void event_loop::impl::process_input(connection & c) {
    const auto now = clock::now();
    while (c.state == conn_state::reading && !c.in.empty()) {
        if (c.list == timer_list::idle) set_list(c, timer_list::head, now);  // its first byte
        const size_t used = c.parser.feed(c.in);
        c.in.erase(0, used);
        const parse_state st = c.parser.state();
        if (st == parse_state::failed) {
            const std::string path = c.parser.head_done() ? c.parser.request().path : "";
            return send_and_close(c, error_response(c.parser.error().http_status, c.parser.error().message), path);
        }
        if (st == parse_state::reading_body && c.list != timer_list::body) {
            set_list(c, timer_list::body, now);
            if (c.parser.request().expect_continue && !c.continue_sent) {
                // The head passed every check: ask for the body (RFC 9110 §10.1.1). The
                // socket's buffer is empty here (the previous response was written).
                static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
                c.continue_sent = true;
                if (::send(c.fd, go_on.data(), go_on.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                    static_cast<ssize_t>(go_on.size())) {
                    return close_conn(c);
                }
            }
        }
        if (st == parse_state::complete) {
            dispatch(c);
            return;
        }
        if (used == 0) break;
    }
}

void event_loop::impl::dispatch(connection & c) {
    http_request req = c.parser.take_request();
    c.parser.reset();
    c.state = conn_state::dispatched;
    c.continue_sent = false;
    set_list(c, timer_list::none, clock::now());
    c.channel = std::make_shared<channel_impl>(box, c.id, req.path, req, opt.max_output_bytes, &observer);
    update_events(c);
    handler(std::move(req), c.channel);  // answers now (through the mailbox) or later
}

void event_loop::impl::flush(connection & c) {
    if (!c.channel) return;
    channel_impl & ch = *c.channel;
    const auto now = clock::now();
    bool failed = false;
    bool done = false;
    bool close_after = false;
    {
        std::lock_guard<std::mutex> lock(ch.mutex);
        while (ch.pending() > 0) {
            const ssize_t n = ::send(c.fd, ch.out.data() + ch.out_pos, ch.pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                ch.out_pos += static_cast<size_t>(n);
                c.last_write_progress = now;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            failed = true;
            break;
        }
        if (ch.out_pos == ch.out.size()) {
            ch.out.clear();
            ch.out_pos = 0;
        } else if (ch.out_pos > (1u << 16) && ch.out_pos * 2 > ch.out.size()) {
            ch.out.erase(0, ch.out_pos);
            ch.out_pos = 0;
        }
        ch.drained.notify_all();
        done = !failed && ch.complete && ch.pending() == 0;
        close_after = ch.close_after;
        if (!failed) set_writing(c, ch.pending() > 0, now);
    }
    if (failed) return close_conn(c);
    if (done) return response_done(c, close_after);
    update_events(c);
}

void event_loop::impl::response_done(connection & c, bool close_after) {
    c.channel.reset();
    if (close_after || c.peer_eof || stopping) return begin_closing(c);
    c.state = conn_state::reading;
    set_list(c, timer_list::idle, clock::now());
    update_events(c);
    process_input(c);  // a pipelined request may be waiting
}

void event_loop::impl::process_mailbox() {
    std::vector<uint64_t> ready;
    {
        std::lock_guard<std::mutex> lock(box->mutex);
        ready.swap(box->ready);
    }
    for (uint64_t id : ready) {
        if (id == drain_note) {
            for (auto & [cid, c] : conns) {
                if (c->channel) c->channel->abort_writers();
            }
            continue;
        }
        if (connection * c = find(id)) flush(*c);
    }
}

void event_loop::impl::sweep(clock::time_point now) {
    while (!idle_list.empty() && now - idle_list.front()->since >= seconds(opt.idle_timeout_s)) close_conn(*idle_list.front());
    while (!head_list.empty() && now - head_list.front()->since >= seconds(opt.head_timeout_s)) {
        char msg[96];
        std::snprintf(msg, sizeof(msg), "The request head did not arrive within %g s", opt.head_timeout_s);
        send_and_close(*head_list.front(), error_response(408, msg), "");
    }
    for (auto it = body_list.begin(); it != body_list.end();) {
        connection & c = **it++;
        const double allowed_s = opt.body_timeout_s + static_cast<double>(c.parser.body_bytes()) / opt.min_body_bytes_per_s;
        if (now - c.since >= seconds(allowed_s)) {
            char msg[160];
            std::snprintf(msg, sizeof(msg), "The request body arrived slower than %g bytes/s (after a grace of %g s)",
                          opt.min_body_bytes_per_s, opt.body_timeout_s);
            send_and_close(c, error_response(408, msg), c.parser.request().path);
        }
    }
    for (auto it = writing_list.begin(); it != writing_list.end();) {
        connection & c = **it++;
        if (now - c.last_write_progress >= seconds(opt.write_timeout_s)) close_conn(c);
    }
    while (!closing_list.empty() && now - closing_list.front()->since >= linger) close_conn(*closing_list.front());
}

void event_loop::impl::run() {
    {
        std::lock_guard<std::mutex> lock(run_mutex);
        if (stop_requested || ran) return;
        running = ran = true;
    }
    epoll_event events[256];
    next_sweep = clock::now() + sweep_interval;
    for (;;) {
        const int n = epoll_wait(epoll_fd, events, 256, static_cast<int>(sweep_interval.count()));
        for (int i = 0; i < n; ++i) {
            const uint64_t tag = events[i].data.u64;
            if (tag == listener_tag) {
                accept_all();
            } else if (tag == wake_tag) {
                uint64_t count = 0;
                if (::read(box->event_fd, &count, sizeof(count)) < 0) { /* nothing pending */ }
            } else if (connection * c = find(tag)) {
                on_event(*c, events[i].events);
            }
        }
        process_mailbox();
        const auto now = clock::now();
        if (now >= next_sweep) {
            sweep(now);
            next_sweep = now + sweep_interval;
        }
        bool stop_now = false;
        {
            std::lock_guard<std::mutex> lock(run_mutex);
            stop_now = stop_requested;
        }
        if (stop_now && !stopping) {
            stopping = true;
            stop_deadline = now + stop_grace;
            epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
            ::close(listen_fd);
            listen_fd = -1;
            std::vector<connection *> quiet;
            for (auto & [id, c] : conns) {
                if (c->state != conn_state::dispatched) quiet.push_back(c.get());
            }
            for (connection * c : quiet) close_conn(*c);
        }
        if (stopping) {
            bool busy = false;
            for (auto & [id, c] : conns) busy = busy || c->state == conn_state::dispatched;
            if (!busy || now >= stop_deadline) break;
        }
    }
    while (!conns.empty()) close_conn(*conns.begin()->second);
    std::lock_guard<std::mutex> lock(run_mutex);
    running = false;
    run_cv.notify_all();
}

event_loop::event_loop(loop_options options, request_handler handler, response_observer observer)
    : impl_(std::make_unique<impl>(std::move(options), std::move(handler), std::move(observer))) {}

event_loop::~event_loop() { stop(); }

status event_loop::bind() { return impl_->bind(); }
int32_t event_loop::port() const { return impl_->bound_port; }
int32_t event_loop::max_connections() const { return impl_->cap; }
int32_t event_loop::n_open() const { return impl_->open_count.load(); }

void event_loop::run() { impl_->run(); }

void event_loop::begin_drain() {
    impl_->box->draining = true;
    impl_->box->post(drain_note);
}

void event_loop::stop() {
    impl & m = *impl_;
    std::unique_lock<std::mutex> lock(m.run_mutex);
    m.stop_requested = true;
    lock.unlock();
    m.box->post(drain_note);  // wakes the loop
    lock.lock();
    m.run_cv.wait(lock, [&] { return !m.running; });
}

}  // namespace skippy::http
