/* The example modules' greeting as a CGI program (bench/wasm.py): the same text from the
 * same request fields, one process per request. It keeps no count across requests (a CGI
 * has nowhere to keep one without a file), so it does slightly less than the modules. */
#include <stdio.h>
#include <stdlib.h>

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : "-";
}

int main(void) {
    char body[1024];
    int n = snprintf(body, sizeof body, "Hello, %s!\nmethod %s target %s query %s\nrequest 1 in this process\n",
                     env("REMOTE_ADDR"), env("REQUEST_METHOD"), env("REQUEST_URI"), env("QUERY_STRING"));
    printf("Content-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\nContent-Length: %d\r\n\r\n%s", n, body);
    return 0;
}
