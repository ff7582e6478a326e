/*
 * netprobe: UDP datagrams for the network attack tests.
 *
 *   netprobe send SRC DST PORT MSG
 *       sends one datagram MSG from SRC (bound, port chosen by the kernel)
 *       to DST:PORT; SRC must be an address of the sender (a spoofing test
 *       first adds the address it claims).
 *   netprobe recv PORT MARKER READY
 *       binds 0.0.0.0:PORT, creates the file READY, then prints
 *       "SOURCE MESSAGE" for each datagram until one whose message is
 *       MARKER, and exits 0.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what)
{
	perror(what);
	return 1;
}

static int addr(struct sockaddr_in *sa, const char *ip, const char *port)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(atoi(port));
	return inet_pton(AF_INET, ip, &sa->sin_addr) == 1 ? 0 : -1;
}

static int do_send(char **argv)
{
	struct sockaddr_in src, dst;
	if (addr(&src, argv[0], "0") || addr(&dst, argv[1], argv[2])) {
		fprintf(stderr, "netprobe: bad address\n");
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return fail("socket");
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0)
		return fail("bind");
	if (sendto(fd, argv[3], strlen(argv[3]), 0, (struct sockaddr *)&dst, sizeof(dst)) < 0)
		return fail("sendto");
	return 0;
}

static int do_recv(char **argv)
{
	struct sockaddr_in any;
	if (addr(&any, "0.0.0.0", argv[0])) {
		fprintf(stderr, "netprobe: bad port\n");
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return fail("socket");
	if (bind(fd, (struct sockaddr *)&any, sizeof(any)) < 0)
		return fail("bind");
	int ready = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (ready < 0)
		return fail("create ready file");
	close(ready);
	for (;;) {
		char buf[512];
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t n = recvfrom(fd, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &len);
		if (n < 0)
			return fail("recvfrom");
		buf[n] = 0;
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
		printf("%s %s\n", ip, buf);
		fflush(stdout);
		if (strcmp(buf, argv[1]) == 0)
			return 0;
	}
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "send") == 0)
		return do_send(argv + 2);
	if (argc == 5 && strcmp(argv[1], "recv") == 0)
		return do_recv(argv + 2);
	fprintf(stderr, "usage: netprobe send SRC DST PORT MSG | netprobe recv PORT MARKER READY\n");
	return 2;
}
