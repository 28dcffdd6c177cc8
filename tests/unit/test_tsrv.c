/* test_tsrv.c - the fake HTTP server of the unit tests (tsrv.h) itself, over a raw
 * socket: what a client library would hide (HEAD framing on a keep-alive
 * connection, exact target matching, a body that stops midway and stalls). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "tsrv.h"

static int dial(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT(fd >= 0);
    ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof a));
    return fd;
}

static void send_all(int fd, const char *p)
{
    size_t n = strlen(p);
    ASSERT_EQ(send(fd, p, n, MSG_NOSIGNAL), (long long)n);
}

/* Reads until buf holds at least want bytes, the peer closes, or 2 s pass
 * without data; returns the length. */
static size_t read_some(int fd, char *buf, size_t cap, size_t want)
{
    size_t len = 0;
    while (len < want && len + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 2000) <= 0)
            break;
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    return len;
}

/* tsrv_nreplies() once it reaches n or 2 s pass: the server counts a reply
 * just after its last write, so the client may read the bytes a moment
 * before the count moves. */
static int nreplies_at_least(struct tsrv *s, int n)
{
    int got;
    for (int i = 0; (got = tsrv_nreplies(s)) < n && i < 200; i++)
        poll(NULL, 0, 10);
    return got;
}

TEST(head_reply_has_the_length_and_no_body)
{
    static const struct tsrv_reply hello = {200, "X-A: 1\r\n", "hello"};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, NULL, "/x", TSRV_EXACT, NULL, &hello, 1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    int fd = dial(port);
    /* HEAD, then a HEAD with no route (404 "no route"), then GET on the same connection */
    send_all(fd, "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\nHEAD /y HTTP/1.1\r\nHost: a\r\n\r\n"
                 "GET /x HTTP/1.1\r\nHost: a\r\n\r\n");
    static const char want[] = "HTTP/1.1 200 X\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n"
                               "HTTP/1.1 404 X\r\nContent-Length: 8\r\n\r\n"
                               "HTTP/1.1 200 X\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello";
    char buf[1024];
    read_some(fd, buf, sizeof buf, sizeof want - 1);
    ASSERT_STREQ(buf, want);
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    ASSERT_EQ(nreplies_at_least(&s, 3), 3);
    ASSERT_EQ(tsrv_conns(&s), 1);
    close(fd);
    tsrv_stop(&s);
}

TEST(target_match_takes_the_query_into_account)
{
    static const struct tsrv_reply a = {200, NULL, "a"}, aq = {200, NULL, "aq"};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, "GET", "/a", TSRV_TARGET, NULL, &a, 1));
    ASSERT_OK(tsrv_route(&s, "GET", "/a?q=1", TSRV_TARGET, NULL, &aq, 1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    int fd = dial(port);
    send_all(fd, "GET /a HTTP/1.1\r\n\r\nGET /a?q=1 HTTP/1.1\r\n\r\nGET /a?x HTTP/1.1\r\n\r\n"
                 "GET /a/b HTTP/1.1\r\n\r\n");
    static const char want[] = "HTTP/1.1 200 X\r\nContent-Length: 1\r\n\r\na"
                               "HTTP/1.1 200 X\r\nContent-Length: 2\r\n\r\naq"
                               "HTTP/1.1 404 X\r\nContent-Length: 8\r\n\r\nno route"
                               "HTTP/1.1 404 X\r\nContent-Length: 8\r\n\r\nno route";
    char buf[1024];
    read_some(fd, buf, sizeof buf, sizeof want - 1);
    ASSERT_STREQ(buf, want);
    close(fd);
    tsrv_stop(&s);
}

TEST(short_body_then_hold_until_the_client_closes)
{
    static const struct tsrv_reply part = {200, NULL, "abc", .short_by = 7, .hold = 1};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, "GET", NULL, TSRV_PREFIX, NULL, &part, 1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    int fd = dial(port);
    send_all(fd, "GET /blob HTTP/1.1\r\n\r\n");
    static const char want[] =
        "HTTP/1.1 200 X\r\nConnection: close\r\nContent-Length: 10\r\n\r\nabc";
    char buf[1024];
    read_some(fd, buf, sizeof buf, sizeof want - 1);
    ASSERT_STREQ(buf, want);
    ASSERT_EQ(nreplies_at_least(&s, 1), 1);
    /* held: no more bytes and no close for a while */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ASSERT_EQ(poll(&p, 1, 300), 0);
    /* the client goes away (half-closes): the server ends the connection */
    ASSERT_OK(shutdown(fd, SHUT_WR));
    ASSERT_EQ(poll(&p, 1, 2000), 1);
    ASSERT_EQ(recv(fd, buf, sizeof buf, 0), 0);
    close(fd);
    tsrv_stop(&s);
}

TEST(short_body_alone_closes)
{
    static const struct tsrv_reply part = {200, NULL, "abc", .short_by = 7};
    struct tsrv s;
    int port = tsrv_start(&s, &part, 1);
    ASSERT(port > 0);
    int fd = dial(port);
    send_all(fd, "GET /blob HTTP/1.1\r\n\r\n");
    char buf[1024];
    size_t n = read_some(fd, buf, sizeof buf, sizeof buf);
    ASSERT_STREQ(buf, "HTTP/1.1 200 X\r\nContent-Length: 10\r\n\r\nabc");
    ASSERT_EQ(n, strlen(buf)); /* and then the close */
    close(fd);
    tsrv_stop(&s);
}
