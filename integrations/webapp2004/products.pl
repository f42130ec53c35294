#!/usr/bin/perl
# The 2004 web-application test's page: one SELECT against MariaDB returning 97 rows of 8
# columns, one of them an image, rendered as an HTML table (the image inline as a data:
# URL). A CGI/1.1 program: a new Perl process and a new database connection per request.
#
# Environment: WEBAPP_SOCKET (the server's Unix socket), WEBAPP_DB, WEBAPP_USER,
# WEBAPP_PASSWORD. bench/webapp2004.py makes the database and runs it under ramjet and
# Apache; ?category=NAME picks another category (default garden).
use strict;
use warnings;
use DBI;
use MIME::Base64 qw(encode_base64);

sub out {
    my ($status, $type, $body) = @_;
    binmode STDOUT;
    print "Status: $status\r\nContent-Type: $type\r\nContent-Length: ", length($body), "\r\n\r\n", $body;
    exit 0;
}

sub html {
    my $s = shift // '';
    $s =~ s/&/&amp;/g;
    $s =~ s/</&lt;/g;
    $s =~ s/>/&gt;/g;
    $s =~ s/"/&quot;/g;
    return $s;
}

my ($category) = ($ENV{QUERY_STRING} // '') =~ /(?:^|&)category=([a-z]{1,32})(?:&|$)/;
$category //= 'garden';
my $dsn = 'DBI:MariaDB:database=' . ($ENV{WEBAPP_DB} // 'webapp2004')
  . ';mariadb_socket=' . ($ENV{WEBAPP_SOCKET} // '/run/mysqld/mysqld.sock');
my $dbh = DBI->connect($dsn, $ENV{WEBAPP_USER} // 'webapp', $ENV{WEBAPP_PASSWORD} // 'webapp',
    {RaiseError => 0, PrintError => 0, AutoCommit => 1})
  or out('503 Service Unavailable', 'text/plain', "database: $DBI::errstr\n");
my $rows = $dbh->selectall_arrayref(
    'SELECT id, sku, name, category, price, stock, updated, thumbnail FROM products'
      . ' WHERE category = ? ORDER BY id', undef, $category)
  or out('500 Internal Server Error', 'text/plain', 'query: ' . $dbh->errstr . "\n");
$dbh->disconnect;

my $body = "<!DOCTYPE html>\n<html><head><title>Products: " . html($category)
  . "</title></head>\n<body>\n<h1>" . scalar(@$rows) . " products in " . html($category)
  . "</h1>\n<table>\n<tr><th>id</th><th>sku</th><th>name</th><th>category</th><th>price</th>"
  . "<th>stock</th><th>updated</th><th>image</th></tr>\n";
for my $r (@$rows) {
    my ($id, $sku, $name, $cat, $price, $stock, $updated, $image) = @$r;
    $body .= "<tr><td>$id</td><td>" . html($sku) . '</td><td>' . html($name) . '</td><td>'
      . html($cat) . "</td><td>$price</td><td>$stock</td><td>$updated</td>"
      . '<td><img alt="" src="data:image/png;base64,' . encode_base64($image // '', '')
      . "\"></td></tr>\n";
}
$body .= "</table>\n</body></html>\n";
out('200 OK', 'text/html; charset=utf-8', $body);
