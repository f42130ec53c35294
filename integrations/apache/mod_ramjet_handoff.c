/*
 * mod_ramjet_handoff: Apache 2.4 receives live client connections that ramjet hands
 * over (ramjet's `handoff` handler), and serves them with its own modules, as if it
 * had accepted them itself.
 *
 * The wire format is ramjet's RJH1 (docs/HANDOFF.md in the ramjet tree): one message
 * carries up to 64 connections, their descriptors attached as SCM_RIGHTS, and per
 * connection the client and local address and the bytes ramjet already read (the
 * prefix). Apache has several processes, so the module binds a SOCK_DGRAM socket that
 * all of them read: whichever child has room takes the next message, as children share
 * a listening socket. ramjet sends each message to the path, so after a restart the
 * next one reaches the new socket.
 *
 * How a connection gets into Apache:
 *
 *   - RamjetHandoffSocket adds a listener (an ap_listen_rec) to Apache's list before the
 *     MPM opens its listeners, and the parent binds the hand-off socket then, so every
 *     child inherits it.
 *   - Under the event MPM, what the MPM polls for this listener is an epoll set of that
 *     socket and an eventfd counting this child's queue; the accept function takes a
 *     connection from the queue, refilling it from the socket with a whole message only
 *     when it is empty (a busy child, whose MPM stops accepting, leaves the next messages
 *     to the other children). Under prefork and worker the MPM polls the socket itself,
 *     and the child whose turn it is takes one connection of the next message and sends
 *     the rest back to the socket for the next child.
 *   - The MPM then runs the connection like any connection it accepted (event: its async
 *     keep-alive and timeouts; every hook and handler: CGI, mod_php, mod_perl,
 *     mod_proxy, logging).
 *   - A pre_connection hook replays the prefix through a connection input filter before
 *     the socket is read, and sets the client address from the record (after a PROXY
 *     protocol header in front of ramjet, the original client).
 *
 * httpd 2.4's Unix MPMs set every listener's accept_func to ap_unixd_accept when a child
 * starts, after the child_init hooks. A thread started in child_init therefore waits
 * until the MPM has done so and then puts this module's accept function in place; until
 * then the listener is marked inactive in the child, so the MPM's own accept() failing
 * on it is not taken for a fault.
 *
 * Backpressure: when no child reads, the socket's queue fills (net.unix.max_dgram_qlen
 * messages) and ramjet's non-blocking send fails; ramjet tries again for up to its
 * `[timeouts] handoff`, then answers 503. Connections still in a child's queue when it
 * stops are passed back to the socket for the other children or the next generation;
 * only what cannot be passed back within two seconds gets a 503 and is closed.
 */

#include "httpd.h"
#include "http_config.h"
#include "http_connection.h"
#include "http_core.h"
#include "http_log.h"
#include "http_main.h"
#include "http_protocol.h"
#include "ap_mpm.h"
#include "util_filter.h"
#include "ap_listen.h"
#include "unixd.h"
#include "apr_strings.h"
#include "apr_thread_proc.h"
#include "apr_thread_mutex.h"
#include "apr_thread_cond.h"
#include "apr_portable.h"
#include "apr_atomic.h"
#include "mpm_common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>

module AP_MODULE_DECLARE_DATA ramjet_handoff_module;

/* Limits of the RJH1 format (docs/HANDOFF.md). */
#define RJH_MAX_BATCH 64
#define RJH_MAX_MESSAGE (128 * 1024)
#define RJH_HEADER 8
#define RJH_ADDR 19
#define RJH_RECORD_FIXED (8 + 2 + RJH_ADDR + RJH_ADDR + 4)

/* Queue slots per child; the receiver reads while a whole batch fits. */
#define QUEUE_SLOTS 256

typedef struct {
    const char *socket_path;
} handoff_conf;

/* One handed-over connection, waiting for the MPM to take it. */
typedef struct {
    int fd;
    apr_uint64_t id;
    apr_uint16_t listener;
    struct sockaddr_storage client, local;
    socklen_t client_len;
    char *prefix; /* malloc'd, may be NULL */
    apr_size_t prefix_len;
} handed_t;

/* What a connection carries from the accept function to the pre_connection hook. */
typedef struct {
    apr_uint64_t id;
    struct sockaddr_storage client;
    const char *data;
    apr_size_t len, off;
} prefix_ctx;

#define PREFIX_KEY "ramjet_handoff_prefix"

/* The listening hand-off socket, bound by the parent and inherited by each child. */
static int listen_fd = -1;
/* A child's own descriptor of the same socket, which connections are passed back to it
 * through. prefork and worker close a child's listeners, listen_fd among them, from
 * their graceful-restart signal handler, which can come between taking a message and
 * passing the rest of it on; what was passed through listen_fd then failed (EBADF) and
 * got a 503, or went to whatever descriptor took its number. */
static int pass_fd = -1;
/* The listener this module added to ap_listeners. */
static ap_listen_rec *handoff_lr;

/* Per-child state (after fork each child has its own copy). */
/* Event MPM: connections of the last message not yet taken, and an eventfd (semaphore)
 * counting them, polled with the shared socket. Used by the listener thread only. */
static handed_t queue[QUEUE_SLOTS];
static int queue_head, queue_len;
/* prefork/worker: connections of the last message this child could not pass on. */
static handed_t spare[RJH_MAX_BATCH];
static int spare_at, spare_len;
static int ready_fd = -1;
static struct sockaddr_un self_addr; /* the socket's path, for passing connections on */
static volatile int stopping;
static apr_thread_t *receiver_thread; /* puts the accept function in place */
static ap_filter_rec_t *prefix_filter_handle;

static const char busy_reply[] =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 20\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\n"
    "\r\n"
    "backend unavailable\n";

static void refuse(handed_t *h)
{
    ssize_t n = write(h->fd, busy_reply, sizeof(busy_reply) - 1);
    (void)n;
    close(h->fd);
    free(h->prefix);
    h->prefix = NULL;
}

/* ---- configuration ---- */

static void *create_server_conf(apr_pool_t *p, server_rec *s)
{
    return apr_pcalloc(p, sizeof(handoff_conf));
}

static const char *set_socket(cmd_parms *cmd, void *dummy, const char *arg)
{
    handoff_conf *conf =
        ap_get_module_config(cmd->server->module_config, &ramjet_handoff_module);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY);
    if (err) {
        return err;
    }
    if (arg[0] != '/') {
        return "RamjetHandoffSocket must be an absolute path";
    }
    if (strlen(arg) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        return "RamjetHandoffSocket is longer than a UNIX socket path may be";
    }
    conf->socket_path = arg;
    return NULL;
}

static const command_rec handoff_cmds[] = {
    AP_INIT_TAKE1("RamjetHandoffSocket", set_socket, NULL, RSRC_CONF,
                  "absolute path of the socket ramjet hands connections to"),
    {NULL}
};

/* ---- the parent: a listener, bound before the MPM opens its listeners ---- */

/* The socket itself lives as long as the parent: bound on the first configuration pass
 * and kept across graceful and hard restarts (which re-run the passes in the same
 * parent), so the path never disappears and what ramjet queued in it during a restart is
 * read by the next generation's children. Each pass's listener record gets a duplicate
 * of it, which httpd closes with the generation's other old listeners. */
typedef struct {
    int fd;
    const char *path;
    pid_t bound_by; /* the process that bound it: only that one removes the path */
} kept_socket;

#define KEPT_KEY "ramjet_handoff_kept"

static apr_status_t refuse_waiting(int fd);

/* The connections still queued in the socket get a 503, then the path and the socket go
 * (at the parent's exit, or when a configuration removes or moves the socket). */
static apr_status_t close_kept(void *data)
{
    kept_socket *k = data;
    if (getpid() == k->bound_by && k->fd >= 0) {
        refuse_waiting(k->fd);
        unlink(k->path);
        close(k->fd);
        k->fd = -1;
    }
    return APR_SUCCESS;
}

/* A cleanup of each generation's configuration pool: at a restart (httpd clears the pool)
 * the socket stays; at the parent's exit (it destroys it) the socket goes. Not a cleanup of
 * the process pool, although that is where the socket's record lives: httpd unloads this
 * module when it clears or destroys the configuration pool, before the process pool's
 * cleanups run, and one pointing here crashed the parent at every stop (SIGSEGV), leaving
 * the path behind and the queued connections unanswered. */
static apr_status_t close_kept_at_exit(void *data)
{
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_EXITING) {
        close_kept(data);
    }
    return APR_SUCCESS;
}

static int bind_socket(server_rec *s, const char *path)
{
    struct sockaddr_un addr;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s, "ramjet_handoff: socket()");
        return -1;
    }
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, path);
    unlink(path);
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s, "ramjet_handoff: cannot listen on %s",
                     path);
        close(fd);
        return -1;
    }
    /* ramjet may run as another user than Apache's children: let it connect. */
    chmod(path, 0666);
    return fd;
}

/* Runs before the MPM's open_logs, which counts and opens ap_listeners. */
static int handoff_open_logs(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp,
                             server_rec *s)
{
    handoff_conf *conf = ap_get_module_config(s->module_config, &ramjet_handoff_module);
    ap_listen_rec *lr, **tail;
    apr_pool_t *pglobal = s->process->pool;
    kept_socket *kept = NULL;
    apr_status_t rv;
    int fd;

    handoff_lr = NULL;
    listen_fd = -1;
    apr_pool_userdata_get((void **)&kept, KEPT_KEY, pglobal);
    if (kept && kept->fd >= 0 && (!conf->socket_path || strcmp(kept->path, conf->socket_path))) {
        /* The socket was removed or moved by this configuration. */
        close_kept(kept);
    }
    if (!conf->socket_path) {
        return OK;
    }
    if (!kept || kept->fd < 0) {
        if (!kept) {
            kept = apr_pcalloc(pglobal, sizeof(*kept));
            apr_pool_userdata_set(kept, KEPT_KEY, apr_pool_cleanup_null, pglobal);
        }
        kept->fd = bind_socket(s, conf->socket_path);
        if (kept->fd < 0) {
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        kept->path = apr_pstrdup(pglobal, conf->socket_path);
        kept->bound_by = getpid();
    }
    apr_pool_cleanup_register(pconf, kept, close_kept_at_exit, apr_pool_cleanup_null);
    fd = fcntl(kept->fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s, "ramjet_handoff: dup");
        return HTTP_INTERNAL_SERVER_ERROR;
    }

    /* Listener records outlive a configuration, as httpd's own do. */
    lr = apr_pcalloc(pglobal, sizeof(*lr));
    rv = apr_os_sock_put(&lr->sd, &fd, pglobal);
    if (rv == APR_SUCCESS) {
        /* An address no Listen directive can name, so httpd never matches it. */
        rv = apr_sockaddr_info_get(&lr->bind_addr, "127.0.0.1", APR_INET, 0, 0, pglobal);
    }
    if (rv != APR_SUCCESS) {
        close(fd);
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    lr->active = 1;
    /* No accept filter applies. A copy: the record outlives this module's code. */
    lr->protocol = apr_pstrdup(pglobal, "ramjet-handoff");
    for (tail = &ap_listeners; *tail; tail = &(*tail)->next) {
    }
    *tail = lr;
    handoff_lr = lr;
    listen_fd = fd;
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s,
                 "ramjet_handoff: receiving connections on %s", conf->socket_path);
    return OK;
}

/* ---- RJH1 messages ---- */

static apr_uint16_t be16(const unsigned char *p) { return (apr_uint16_t)((p[0] << 8) | p[1]); }
static apr_uint32_t be32(const unsigned char *p)
{
    return ((apr_uint32_t)p[0] << 24) | ((apr_uint32_t)p[1] << 16) | ((apr_uint32_t)p[2] << 8) | p[3];
}
static apr_uint64_t be64(const unsigned char *p)
{
    return ((apr_uint64_t)be32(p) << 32) | be32(p + 4);
}

/* An RJH1 address into a sockaddr; 0 when it is malformed. */
static int decode_addr(const unsigned char *p, struct sockaddr_storage *out, socklen_t *len)
{
    static const unsigned char zero[12];
    memset(out, 0, sizeof(*out));
    if (p[0] == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)out;
        if (memcmp(p + 5, zero, 12) != 0) {
            return 0;
        }
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_addr, p + 1, 4);
        sin->sin_port = htons(be16(p + 17));
        *len = sizeof(*sin);
        return 1;
    }
    if (p[0] == 6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_addr, p + 1, 16);
        sin6->sin6_port = htons(be16(p + 17));
        *len = sizeof(*sin6);
        return 1;
    }
    return 0;
}

/* Parse one message; on success the records are in out[0..count). */
static int decode_records(const unsigned char *buf, size_t len, int nfds, handed_t *out,
                          int *count);

static int decode_message(const unsigned char *buf, size_t len, int nfds, handed_t *out,
                          int *count)
{
    int i;
    *count = 0;
    for (i = 0; i < RJH_MAX_BATCH; i++) {
        out[i].prefix = NULL;
    }
    if (decode_records(buf, len, nfds, out, count)) {
        return 1;
    }
    for (i = 0; i < RJH_MAX_BATCH; i++) {
        free(out[i].prefix);
        out[i].prefix = NULL;
    }
    *count = 0;
    return 0;
}

static int decode_records(const unsigned char *buf, size_t len, int nfds, handed_t *out,
                          int *count)
{
    size_t at = RJH_HEADER;
    int n, i;
    if (len < RJH_HEADER || memcmp(buf, "RJH1", 4) != 0 || be16(buf + 6) != 0) {
        return 0;
    }
    n = be16(buf + 4);
    if (n < 1 || n > RJH_MAX_BATCH || n != nfds) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        socklen_t local_len;
        apr_uint32_t plen;
        if (len - at < RJH_RECORD_FIXED) {
            return 0;
        }
        out[i].id = be64(buf + at);
        out[i].listener = be16(buf + at + 8);
        if (!decode_addr(buf + at + 10, &out[i].client, &out[i].client_len)
            || !decode_addr(buf + at + 10 + RJH_ADDR, &out[i].local, &local_len)) {
            return 0;
        }
        plen = be32(buf + at + 10 + 2 * RJH_ADDR);
        at += RJH_RECORD_FIXED;
        if (plen > len - at) {
            return 0;
        }
        out[i].prefix_len = plen;
        if (plen) {
            out[i].prefix = malloc(plen);
            if (!out[i].prefix) {
                return 0;
            }
            memcpy(out[i].prefix, buf + at, plen);
        }
        at += plen;
    }
    if (at != len) {
        return 0;
    }
    *count = n;
    return 1;
}

static void put16(unsigned char *p, apr_uint16_t v) { p[0] = v >> 8; p[1] = v & 0xff; }
static void put32(unsigned char *p, apr_uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v & 0xffff);
}

static void encode_addr(unsigned char *p, const struct sockaddr_storage *a)
{
    memset(p, 0, RJH_ADDR);
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)a;
        p[0] = 4;
        memcpy(p + 1, &sin->sin_addr, 4);
        put16(p + 17, ntohs(sin->sin_port));
    }
    else {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)a;
        p[0] = 6;
        memcpy(p + 1, &sin6->sin6_addr, 16);
        put16(p + 17, ntohs(sin6->sin6_port));
    }
}

/* Pass connections this child has no room for back to the socket, as one RJH1 message,
 * for a child with room to take (an MPM that serves one connection per thread). Returns
 * whether they went; if not, they stay for this child. */
static int pass_on(handed_t *h, int n)
{
    static unsigned char buf[RJH_MAX_MESSAGE];
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * RJH_MAX_BATCH)];
    } control;
    struct iovec iov;
    struct msghdr msg;
    struct cmsghdr *cmsg;
    size_t at = RJH_HEADER;
    int i;

    memcpy(buf, "RJH1", 4);
    put16(buf + 4, (apr_uint16_t)n);
    put16(buf + 6, 0);
    for (i = 0; i < n; i++) {
        apr_uint64_t id = h[i].id;
        if (at + RJH_RECORD_FIXED + h[i].prefix_len > sizeof(buf)) {
            errno = EMSGSIZE;
            return 0;
        }
        put32(buf + at, (apr_uint32_t)(id >> 32));
        put32(buf + at + 4, (apr_uint32_t)id);
        put16(buf + at + 8, h[i].listener);
        encode_addr(buf + at + 10, &h[i].client);
        encode_addr(buf + at + 10 + RJH_ADDR, &h[i].local);
        put32(buf + at + 10 + 2 * RJH_ADDR, (apr_uint32_t)h[i].prefix_len);
        at += RJH_RECORD_FIXED;
        if (h[i].prefix_len) {
            memcpy(buf + at, h[i].prefix, h[i].prefix_len);
        }
        at += h[i].prefix_len;
    }
    memset(&msg, 0, sizeof(msg));
    memset(&control, 0, sizeof(control));
    iov.iov_base = buf;
    iov.iov_len = at;
    msg.msg_name = &self_addr;
    msg.msg_namelen = sizeof(self_addr);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.space;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n);
    for (i = 0; i < n; i++) {
        memcpy(CMSG_DATA(cmsg) + i * sizeof(int), &h[i].fd, sizeof(int));
    }
    if (sendmsg(pass_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        close(h[i].fd);
        free(h[i].prefix);
        h[i].prefix = NULL;
    }
    return 1;
}

/* Read one message, if one is waiting, into out[]; returns how many connections it
 * carried (0: none waiting, or a malformed message, refused and its descriptors closed).
 * The connections' sockets are made blocking, as APR expects of a new socket. */
static int receive(server_rec *s, handed_t *out)
{
    static unsigned char buf[RJH_MAX_MESSAGE];
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * RJH_MAX_BATCH)];
    } control;
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr msg;
    struct cmsghdr *cmsg;
    int fds[RJH_MAX_BATCH];
    int nfds = 0, count = 0, i, ok;
    ssize_t got;

    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.space;
    msg.msg_controllen = sizeof(control.space);
    got = recvmsg(listen_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0) {
        return 0;
    }
    for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
            int k = (int)((cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int j;
            for (j = 0; j < k; j++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cmsg) + j * sizeof(int), sizeof(int));
                if (nfds < RJH_MAX_BATCH) {
                    fds[nfds++] = fd;
                }
                else {
                    close(fd);
                }
            }
        }
    }
    ok = !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
        && decode_message(buf, (size_t)got, nfds, out, &count);
    for (i = 0; ok && i < nfds; i++) {
        int type = 0;
        socklen_t tl = sizeof(type);
        if (getsockopt(fds[i], SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM) {
            ok = 0;
        }
    }
    if (!ok) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,
                     "ramjet_handoff: refused a malformed message (%ld bytes, %d descriptors)",
                     (long)got, nfds);
        for (i = 0; i < count; i++) {
            free(out[i].prefix);
        }
        for (i = 0; i < nfds; i++) {
            close(fds[i]);
        }
        return 0;
    }
    for (i = 0; i < count; i++) {
        int flags = fcntl(fds[i], F_GETFL);
        if (flags >= 0) {
            fcntl(fds[i], F_SETFL, flags & ~O_NONBLOCK);
        }
        out[i].fd = fds[i];
    }
    return count;
}

/* Answer every connection still queued in the socket `fd` with a 503 (at a stop). */
static apr_status_t refuse_waiting(int fd)
{
    handed_t got[RJH_MAX_BATCH];
    int saved = listen_fd, rounds, i, n;
    struct pollfd p;
    listen_fd = fd;
    for (rounds = 0; rounds < 100000; rounds++) {
        p.fd = fd;
        p.events = POLLIN;
        p.revents = 0;
        if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN)) {
            break;
        }
        n = receive(ap_server_conf, got);
        if (n > 0) {
            ap_log_error(APLOG_MARK, APLOG_WARNING, 0, ap_server_conf,
                         "ramjet_handoff: stopping with %d connection(s) queued; answered 503", n);
        }
        for (i = 0; i < n; i++) {
            refuse(&got[i]);
        }
    }
    listen_fd = saved;
    return APR_SUCCESS;
}

/* A handed connection as the socket an accept function returns; the descriptor then
 * belongs to ptrans, and the pre_connection hook finds the rest in its userdata. */
static apr_status_t accepted_socket(handed_t *h, apr_pool_t *ptrans, void **accepted)
{
    apr_socket_t *csd = NULL;
    apr_os_sock_info_t info;
    struct sockaddr_storage local;
    socklen_t local_len = sizeof(local);
    prefix_ctx *ctx;

    if (getsockname(h->fd, (struct sockaddr *)&local, &local_len) < 0) {
        close(h->fd);
        free(h->prefix);
        return APR_EAGAIN;
    }
    memset(&info, 0, sizeof(info));
    info.os_sock = &h->fd;
    info.local = (struct sockaddr *)&local;
    info.family = local.ss_family;
    info.type = SOCK_STREAM;
    info.protocol = IPPROTO_TCP;
    if (apr_os_sock_make(&csd, &info, ptrans) != APR_SUCCESS) {
        close(h->fd);
        free(h->prefix);
        return APR_EAGAIN;
    }
    ctx = apr_pcalloc(ptrans, sizeof(*ctx));
    ctx->id = h->id;
    ctx->client = h->client;
    ctx->len = h->prefix_len;
    ctx->data = h->prefix_len ? apr_pmemdup(ptrans, h->prefix, h->prefix_len) : "";
    apr_pool_userdata_setn(ctx, PREFIX_KEY, NULL, ptrans);
    free(h->prefix);
    h->prefix = NULL;
    *accepted = csd;
    return APR_SUCCESS;
}

/* ---- an async MPM (event): the listener polls the socket and this child's queue ---- */

/* The accept function, on the MPM's listener thread (its only caller in a child): one
 * connection from this child's queue, which is refilled with a whole message from the
 * shared socket only when it is empty. A child whose MPM has stopped accepting (busy)
 * does not call it, so it takes no message, and the other children do. */
static apr_status_t handoff_accept(void **accepted, ap_listen_rec *lr, apr_pool_t *ptrans)
{
    apr_uint64_t one;
    handed_t h;

    *accepted = NULL;
    if (queue_len == 0) {
        /* A new message: the first connection is taken now, the eventfd counts the
         * rest for the next calls. */
        handed_t batch[RJH_MAX_BATCH];
        int count = receive(ap_server_conf, batch), i;
        if (count == 0) {
            return APR_EAGAIN;
        }
        for (i = 1; i < count; i++) {
            queue[(queue_head + queue_len) % QUEUE_SLOTS] = batch[i];
            queue_len++;
        }
        if (count > 1) {
            apr_uint64_t n = (apr_uint64_t)(count - 1);
            ssize_t w = write(ready_fd, &n, sizeof(n));
            (void)w;
        }
        return accepted_socket(&batch[0], ptrans, accepted);
    }
    if (read(ready_fd, &one, sizeof(one)) != sizeof(one)) {
        return APR_EAGAIN;
    }
    h = queue[queue_head];
    queue_head = (queue_head + 1) % QUEUE_SLOTS;
    queue_len--;
    return accepted_socket(&h, ptrans, accepted);
}

static apr_status_t handoff_accept_one(void **accepted, ap_listen_rec *lr,
                                       apr_pool_t *ptrans);

/* Wait until the MPM has set the listener's accept_func (it does when a child starts,
 * after child_init), then put `fn` in its place. */
static void take_over_accept(accept_function fn)
{
    int i;
    for (i = 0; i < 2000 && !stopping; i++) {
        if (__atomic_load_n(&handoff_lr->accept_func, __ATOMIC_ACQUIRE) == ap_unixd_accept) {
            break;
        }
        apr_sleep(apr_time_from_msec(5));
    }
    __atomic_store_n(&handoff_lr->accept_func, fn, __ATOMIC_RELEASE);
}

static void *APR_THREAD_FUNC take_over_main(apr_thread_t *thd, void *data)
{
    int async = 0;
    ap_mpm_query(AP_MPMQ_IS_ASYNC, &async);
    take_over_accept(async ? handoff_accept : handoff_accept_one);
    return NULL;
}

/* Pass connections back to the socket, waiting while its queue is full (the other
 * children and the next generation's are reading it) for up to two seconds. */
static int pass_back(handed_t *h, int n)
{
    /* Bounded by time, 1 ms between tries: the socket is not connected, so polling it for
     * POLLOUT answers at once from its own send buffer and says nothing of the full queue
     * it sends to: 200 polled tries could pass in no time while ramjet, trying every 2 ms,
     * kept the queue (10 datagrams by default) full through a restart. */
    int tries;
    for (tries = 0; tries < 2000; tries++) {
        if (pass_on(h, n)) {
            return 1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return 0;
        }
        poll(NULL, 0, 1);
    }
    return 0;
}

/* When the child goes (a graceful or hard restart, MaxConnectionsPerChild, a stop):
 * connections still in its queue go back to the socket, where the other children or the
 * next generation's take them (the parent keeps the socket across restarts, and at a
 * stop answers what is left there with a 503). Only what cannot be passed on gets a 503
 * here. A pre-cleanup, so it runs before the child's subpools go; the MPM's threads have
 * ended by then. */
static apr_status_t stop_child(void *data)
{
    apr_status_t rv;
    handed_t back[RJH_MAX_BATCH];
    int n = 0;
    stopping = 1;
    apr_thread_join(&rv, receiver_thread);
    while (queue_len > 0 || spare_len > 0 || n > 0) {
        if (n < RJH_MAX_BATCH && queue_len > 0) {
            back[n++] = queue[queue_head];
            queue_head = (queue_head + 1) % QUEUE_SLOTS;
            queue_len--;
            continue;
        }
        if (n < RJH_MAX_BATCH && spare_len > 0) {
            back[n++] = spare[spare_at++];
            spare_len--;
            continue;
        }
        if (!pass_back(back, n)) {
            int i;
            ap_log_error(APLOG_MARK, APLOG_WARNING, errno, ap_server_conf,
                         "ramjet_handoff: a stopping child could not pass %d connection(s) "
                         "back for two seconds; answered 503", n);
            for (i = 0; i < n; i++) {
                refuse(&back[i]);
            }
        }
        n = 0;
    }
    return APR_SUCCESS;
}

/* ---- a sync MPM (prefork, worker): children take turns on the shared socket ---- */


/* The accept function: prefork and worker call it when this child may take one
 * connection (they serialise children with the accept mutex). It takes one connection
 * of the next message and passes the rest back to the socket for the next child. */
static apr_status_t handoff_accept_one(void **accepted, ap_listen_rec *lr, apr_pool_t *ptrans)
{
    handed_t h;
    *accepted = NULL;
    if (spare_len == 0) {
        spare_len = receive(ap_server_conf, spare);
        spare_at = 0;
        if (spare_len == 0) {
            return APR_EAGAIN;
        }
    }
    h = spare[spare_at++];
    spare_len--;
#ifdef RAMJET_HANDOFF_TEST_PAUSE_MS
    /* Tests only: a wide window between taking a message and passing the rest of it on,
     * for a signal to land in. */
    if (spare_len > 0) {
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, ap_server_conf,
                     "ramjet_handoff: test pause with %d connection(s) to pass on", spare_len);
        apr_sleep(apr_time_from_msec(RAMJET_HANDOFF_TEST_PAUSE_MS));
    }
#endif
    if (spare_len > 0 && pass_on(spare + spare_at, spare_len)) {
        spare_len = 0;
    }
    return accepted_socket(&h, ptrans, accepted);
}

/* ---- the child ---- */

static void handoff_child_init(apr_pool_t *pchild, server_rec *s)
{
    handoff_conf *conf = ap_get_module_config(s->module_config, &ramjet_handoff_module);
    int async = 0;

    if (!handoff_lr || listen_fd < 0) {
        return;
    }
    memset(&self_addr, 0, sizeof(self_addr));
    self_addr.sun_family = AF_UNIX;
    strcpy(self_addr.sun_path, conf->socket_path);
    pass_fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 3);
    if (pass_fd < 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s,
                     "ramjet_handoff: dup; passing connections on through the listener");
        pass_fd = listen_fd;
    }
    /* The MPM sets it after this hook; the thread that puts the module's in place waits
     * to see that happen (the value inherited from the parent may already be the MPM's).
     * Until then the MPM's own accept() fails on the listener; it is marked inactive in
     * the child so that this is not taken for a fault (which would end the child).
     * Nothing else in the child reads the flag. */
    __atomic_store_n(&handoff_lr->accept_func, NULL, __ATOMIC_RELEASE);
    handoff_lr->active = 0;
    ap_mpm_query(AP_MPMQ_IS_ASYNC, &async);
    if (async) {
        /* What the MPM polls for this listener: an epoll set of the shared socket and
         * the eventfd counting this child's queue, readable while either has some. */
        struct epoll_event ev;
        int ep = epoll_create1(EPOLL_CLOEXEC);
        ready_fd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN;
        if (ep < 0 || ready_fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev) < 0
            || epoll_ctl(ep, EPOLL_CTL_ADD, ready_fd, &ev) < 0) {
            ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s, "ramjet_handoff: epoll set");
            return;
        }
        apr_os_sock_put(&handoff_lr->sd, &ep, pchild);
    }
    if (ap_thread_create(&receiver_thread, NULL, take_over_main, s, pchild)) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "ramjet_handoff: cannot start a thread");
        return;
    }
    apr_pool_pre_cleanup_register(pchild, NULL, stop_child);
}

/* ---- the prefix: bytes ramjet read, replayed before the socket ---- */

static apr_status_t prefix_filter(ap_filter_t *f, apr_bucket_brigade *bb,
                                  ap_input_mode_t mode, apr_read_type_e block,
                                  apr_off_t readbytes)
{
    prefix_ctx *ctx = f->ctx;
    apr_size_t left = ctx->len - ctx->off, n = 0;
    const char *at = ctx->data + ctx->off;

    if (left == 0 || mode == AP_MODE_INIT) {
        if (left == 0) {
            ap_remove_input_filter(f);
        }
        return ap_get_brigade(f->next, bb, mode, block, readbytes);
    }
    switch (mode) {
    case AP_MODE_GETLINE: {
        const char *lf = memchr(at, '\n', left);
        n = lf ? (apr_size_t)(lf - at) + 1 : left;
        break;
    }
    case AP_MODE_EATCRLF:
        while (ctx->off < ctx->len
               && (ctx->data[ctx->off] == '\r' || ctx->data[ctx->off] == '\n')) {
            ctx->off++;
        }
        return APR_SUCCESS;
    case AP_MODE_EXHAUSTIVE:
        n = left;
        break;
    default: /* READBYTES, SPECULATIVE */
        n = readbytes > 0 && (apr_size_t)readbytes < left ? (apr_size_t)readbytes : left;
        break;
    }
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_immortal_create(at, n, f->c->bucket_alloc));
    if (mode != AP_MODE_SPECULATIVE) {
        ctx->off += n;
    }
    return APR_SUCCESS;
}

static int handoff_pre_connection(conn_rec *c, void *csd)
{
    void *data = NULL;
    prefix_ctx *ctx;
    apr_pool_userdata_get(&data, PREFIX_KEY, c->pool);
    if (!data) {
        return DECLINED;
    }
    ctx = data;
    {
        /* The client ramjet saw: after a PROXY protocol header in front of ramjet, the
         * original client, which the socket's own peer address is not. Built in place:
         * apr_sockaddr_info_get would call getaddrinfo, whose address-configuration
         * check costs a netlink dump per connection. */
        char ip[INET6_ADDRSTRLEN];
        apr_sockaddr_t *sa = apr_pcalloc(c->pool, sizeof(*sa));
        const void *bytes;
        sa->pool = c->pool;
        if (ctx->client.ss_family == AF_INET) {
            memcpy(&sa->sa.sin, &ctx->client, sizeof(struct sockaddr_in));
            sa->family = APR_INET;
            sa->port = ntohs(sa->sa.sin.sin_port);
            sa->salen = sizeof(struct sockaddr_in);
            sa->ipaddr_len = sizeof(struct in_addr);
            sa->addr_str_len = 16;
            sa->ipaddr_ptr = &sa->sa.sin.sin_addr;
            bytes = &sa->sa.sin.sin_addr;
        }
        else {
            memcpy(&sa->sa.sin6, &ctx->client, sizeof(struct sockaddr_in6));
            sa->family = APR_INET6;
            sa->port = ntohs(sa->sa.sin6.sin6_port);
            sa->salen = sizeof(struct sockaddr_in6);
            sa->ipaddr_len = sizeof(struct in6_addr);
            sa->addr_str_len = 46;
            sa->ipaddr_ptr = &sa->sa.sin6.sin6_addr;
            bytes = &sa->sa.sin6.sin6_addr;
        }
        if (inet_ntop(ctx->client.ss_family, bytes, ip, sizeof(ip))) {
            c->client_addr = sa;
            c->client_ip = apr_pstrdup(c->pool, ip);
        }
    }
    ap_log_cerror(APLOG_MARK, APLOG_DEBUG, 0, c,
                  "ramjet_handoff: connection %" APR_UINT64_T_FMT " with %lu prefix bytes",
                  ctx->id, (unsigned long)ctx->len);
    if (ctx->len > ctx->off) {
        ap_add_input_filter_handle(prefix_filter_handle, ctx, NULL, c);
    }
    return DECLINED;
}

static void handoff_register_hooks(apr_pool_t *p)
{
    /* Before the MPM's open_logs, which opens and counts the listeners. */
    static const char *const mpms[] = {"event.c", "worker.c", "prefork.c", NULL};
    ap_hook_open_logs(handoff_open_logs, NULL, mpms, APR_HOOK_REALLY_FIRST - 1);
    ap_hook_child_init(handoff_child_init, NULL, NULL, APR_HOOK_MIDDLE);
    ap_hook_pre_connection(handoff_pre_connection, NULL, NULL, APR_HOOK_MIDDLE);
    prefix_filter_handle = ap_register_input_filter("RAMJET_HANDOFF_PREFIX", prefix_filter,
                                                    NULL, AP_FTYPE_NETWORK - 1);
}

AP_DECLARE_MODULE(ramjet_handoff) = {
    STANDARD20_MODULE_STUFF,
    NULL,
    NULL,
    create_server_conf,
    NULL,
    handoff_cmds,
    handoff_register_hooks
#ifdef AP_MODULE_FLAG_NONE
    , AP_MODULE_FLAG_NONE
#endif
};
