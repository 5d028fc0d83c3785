/*
 * promserver: a tiny HTTP server exposing a Prometheus text exposition,
 * the fixture of package qos's prom source tests.
 *
 * Build: gcc -O2 -Wall -o promserver promserver.c   (the tests do this)
 * Run:   ./promserver   prints "PORT <n>" once it listens on 127.0.0.1
 *        (an ephemeral port) and exits when its standard input closes.
 *
 * Every GET /metrics is scrape number n (1, 2, ...) and reports counters
 * that grew by a fixed amount per scrape, so a test knows the exact
 * difference between two scrapes without looking at a clock:
 *   fixture_requests_total{code="200"}  1000 n   (TYPE counter)
 *   fixture_requests_total{code="500"}    10 n
 *   fixture_untyped_total                  7 n   (no TYPE line)
 *   fixture_latency_seconds histogram: _count 2n, _sum 0.5n
 * and gauges that do not change:
 *   fixture_temperature{room="a b",note="say \"hi\"\n"} 21.5
 *   fixture_temperature{room="c"} 19
 *   fixture_untyped 3
 * GET /garbage answers a malformed exposition, GET /slow answers after 1 s,
 * anything else 404.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void reply(int fd, const char *status, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, strlen(body));
	write(fd, head, (size_t)n);
	write(fd, body, strlen(body));
}

static void serve(int fd, unsigned long *scrapes)
{
	char req[4096];
	size_t got = 0;
	/* read the request head (we need only the first line) */
	while (got < sizeof req - 1) {
		ssize_t r = read(fd, req + got, sizeof req - 1 - got);
		if (r <= 0)
			return;
		got += (size_t)r;
		req[got] = 0;
		if (strstr(req, "\r\n\r\n"))
			break;
	}
	if (strncmp(req, "GET /metrics ", 13) == 0) {
		unsigned long n = ++*scrapes;
		char body[2048];
		snprintf(body, sizeof body,
			 "# HELP fixture_requests_total Requests served, 1000 more per scrape.\n"
			 "# TYPE fixture_requests_total counter\n"
			 "fixture_requests_total{code=\"200\"} %lu\n"
			 "fixture_requests_total{code=\"500\"} %lu\n"
			 "# HELP fixture_temperature A gauge that does not change.\n"
			 "# TYPE fixture_temperature gauge\n"
			 "fixture_temperature{room=\"a b\",note=\"say \\\"hi\\\"\\n\"} 21.5\n"
			 "fixture_temperature{room=\"c\"} 19 1700000000000\n"
			 "# TYPE fixture_latency_seconds histogram\n"
			 "fixture_latency_seconds_bucket{le=\"0.1\"} %lu\n"
			 "fixture_latency_seconds_bucket{le=\"+Inf\"} %lu\n"
			 "fixture_latency_seconds_sum %g\n"
			 "fixture_latency_seconds_count %lu\n"
			 "fixture_untyped_total %lu\n"
			 "fixture_untyped 3\n",
			 1000 * n, 10 * n, n, 2 * n, 0.5 * (double)n, 2 * n, 7 * n);
		reply(fd, "200 OK", body);
	} else if (strncmp(req, "GET /garbage ", 13) == 0) {
		reply(fd, "200 OK", "fixture_requests_total{code=\"200\" 12\n");
	} else if (strncmp(req, "GET /slow ", 10) == 0) {
		sleep(1);
		reply(fd, "200 OK", "fixture_untyped 3\n");
	} else {
		reply(fd, "404 Not Found", "not found\n");
	}
}

int main(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16)) {
		perror("promserver: listen");
		return 1;
	}
	socklen_t al = sizeof a;
	getsockname(s, (struct sockaddr *)&a, &al);
	printf("PORT %d\n", ntohs(a.sin_port));
	fflush(stdout);
	unsigned long scrapes = 0;
	struct pollfd p[2] = {{.fd = s, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
	for (;;) {
		if (poll(p, 2, -1) < 0)
			continue;
		if (p[1].revents) {
			char c;
			if (read(0, &c, 1) <= 0)
				return 0; /* stdin closed: the test is done */
		}
		if (p[0].revents & POLLIN) {
			int c = accept(s, 0, 0);
			if (c >= 0) {
				serve(c, &scrapes);
				close(c);
			}
		}
	}
}
