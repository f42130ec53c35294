#!/usr/bin/perl
# SPECweb99's CGI dynamic GET (specweb99.md §3.2): the file named by QUERY_STRING, framed
# exactly as the in-process module frames it. A new process per request, as the run rules
# ask of the CGI share. The file set's directory comes from SPECWEB_ROOT (ramjet:
# cgi_env = { SPECWEB_ROOT = "/srv/specweb" }; Apache: SetEnv SPECWEB_ROOT /srv/specweb),
# else DOCUMENT_ROOT.
use strict;
use warnings;

my $root = $ENV{SPECWEB_ROOT} // $ENV{DOCUMENT_ROOT} // '.';
my $query = $ENV{QUERY_STRING} // '';
unless ($query =~ m{^/?(file_set/dir\d{5}/class[0-3]_[0-8])$}) {
    print "Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\nno such object: $query\n";
    exit 0;
}
my $path = "$root/$1";
open(my $fh, '<:raw', $path) or do {
    print "Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\n$1: not in the file set\n";
    exit 0;
};
local $/;
my $file = <$fh>;
close $fh;
my $head = "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n"
  . "<p>SERVER_SOFTWARE = " . ($ENV{SERVER_SOFTWARE} // '') . "\n"
  . "<p>REMOTE_ADDR = " . ($ENV{REMOTE_ADDR} // '') . "\n"
  . "<p>SCRIPT_NAME = " . ($ENV{SCRIPT_NAME} // '') . "\n"
  . "<p>QUERY_STRING = $query\n<pre>\n";
my $tail = "\n</pre>\n</body></html>\n";
binmode STDOUT;
print "Content-Type: text/html\r\nContent-Length: " . (length($head) + length($file) + length($tail)) . "\r\n\r\n";
print $head, $file, $tail;
