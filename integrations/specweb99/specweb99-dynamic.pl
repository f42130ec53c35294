#!/usr/bin/perl
# SPECweb99's whole dynamic share as one CGI/1.1 program (specweb99.md §3): the standard
# dynamic GET, the GET with custom ad rotation (CAD), the POST with its post log, and the
# manager's command/Reset, command/Fetch and command/Finish. It gives the same replies, byte for byte, as
# ramjet's in-process `specweb99` module, so one client checks both.
#
# This is what a server without a module API runs for the benchmark: Apache's side of
# bench/specweb_peers.py mounts it with `ScriptAlias`, and every dynamic request starts a
# new Perl process.
#
# Environment: SPECWEB_ROOT (holds file_set/; else DOCUMENT_ROOT), SPECWEB_DATA (where
# User.Personality, Custom.Ads and post.log live; else SPECWEB_ROOT), SPECWEB_SERVER (the
# SERVER_SOFTWARE line of the frame; else SERVER_SOFTWARE).
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT SEEK_SET);
use IO::Handle;

my $root = $ENV{SPECWEB_ROOT} // $ENV{DOCUMENT_ROOT} // '.';
my $data = $ENV{SPECWEB_DATA} // $root;
my $server = $ENV{SPECWEB_SERVER} // $ENV{SERVER_SOFTWARE} // '';
my $query = $ENV{QUERY_STRING} // '';
my $method = $ENV{REQUEST_METHOD} // 'GET';

use constant {
    ADS => 360, SEARCH_INTERVAL => 24, MAX_AD_WEIGHT => 75, USER_RECORD => 15,
    HEADER => 11, RECORD => 139, EXPIRED_BEFORE => 31_622_400,
};

binmode STDOUT;

sub reply {
    my ($status, $headers, $body) = @_;
    my $h = $status == 200 ? '' : "Status: $status\r\n";
    $h .= "$_\r\n" for @$headers;
    print $h, "Content-Length: ", length($body), "\r\n\r\n", $body;
    exit 0;
}

sub fail { reply($_[0], ['Content-Type: text/plain'], $_[1]) }

# The frame of every dynamic reply (specweb99.md §3.1), around `$inner`.
sub framed {
    my ($inner, @headers) = @_;
    my $head = "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n"
      . "<p>SERVER_SOFTWARE = $server\n"
      . "<p>REMOTE_ADDR = " . ($ENV{REMOTE_ADDR} // '') . "\n"
      . "<p>SCRIPT_NAME = " . ($ENV{SCRIPT_NAME} // '') . "\n"
      . "<p>QUERY_STRING = $query\n<pre>\n";
    reply(200, ['Content-Type: text/html', @headers], $head . $inner . "\n</pre>\n</body></html>\n");
}

sub read_object {
    my ($dir, $class, $num) = @_;
    my $name = sprintf('file_set/dir%05d/class%d_%d', $dir, $class, $num);
    open(my $fh, '<:raw', "$root/$name") or fail(404, "$name: not in the file set\n");
    local $/;
    my $bytes = <$fh>;
    return $bytes // '';
}

sub object_of_query {
    $query =~ m{^/?(?:[^?&]*/)?file_set/dir(\d{5})/class([0-3])_([0-8])$}
      or fail(404, "the query names no file_set/dirNNNNN/classC_F object\n");
    return ($1 + 0, $2 + 0, $3 + 0);
}

sub my_cookie {
    my $c = $ENV{HTTP_COOKIE} // '';
    $c =~ /(?:^|;\s*)my_cookie=user_id=(\d+)&last_ad=(\d+)/ or return;
    return ($1, $2);
}

# --- the tables (upfgen99, cadgen99) ---------------------------------------------------

sub record_key {
    my $k = ($_[0] * 10000) % 12301;
    return $k == 0 ? 12300 : $k;
}

sub demographics {
    my ($j, $for_ads) = @_;
    my $k = record_key($j);
    my ($c4, $c3, $c2) = ($k & 0xF, ($k >> 4) & 0xF, ($k >> 8) & 0xF);
    my $i2 = $c4 % 10;
    # The kit's swapped interest-2 entries (specweb99.md §3.3).
    my $interest2 = ($i2 == 4 || $i2 == 5)
      ? (($i2 == 4) xor $for_ads) ? 0x20 : 0x10
      : 0x200 >> $i2;
    return ($k % 2 == 1 ? 0x20000000 : 0x10000000) | (0x08000000 >> ($k % 4))
      | (0x00800000 >> (($c4 + $c2) % 4)) | (0x00080000 >> (($c4 + $c3) % 10)) | $interest2;
}

sub write_atomically {
    my ($name, $bytes) = @_;
    open(my $fh, '>:raw', "$data/.$name.tmp") or fail(500, "$name: $!\n");
    print $fh $bytes;
    close($fh) or fail(500, "$name: $!\n");
    rename("$data/.$name.tmp", "$data/$name") or fail(500, "$name: $!\n");
}

sub reset_tables {
    my %p = map { split /=/, $_, 2 } grep {/=/} split /&/, $_[0];
    my ($maxload, $pttime, $maxthread) = map { ($p{$_} // 0) + 0 } qw(maxload pttime maxthread);
    my @exp = map { ($_ || 0) % ADS } split /,/, ($p{exp} // '0,0');
    my $users = $maxload > $maxthread ? $maxload : $maxthread;
    write_atomically('User.Personality',
        join '', map { sprintf("%5d %8X\n", $_, demographics($_ % ADS, 0)) } 0 .. $users - 1);
    $pttime ||= 1800;
    my $ts = time() + 2 * $pttime;
    my @ads = map {
        my $w = (record_key($_) ** 2) % 1_048_576;
        [demographics($_, 1), $w == 0 ? 0x27104 : $w, MAX_AD_WEIGHT, $ts]
    } 0 .. ADS - 1;
    for (my $j = $maxthread % SEARCH_INTERVAL; $j < ADS; $j += SEARCH_INTERVAL) {
        @{$ads[$j]}[0 .. 2] = ($ads[$j][0] | 0x3FF, 0x3FFFF, 1);
    }
    for my $start (@exp[0, 1]) {
        $ads[($start + $_) % ADS][3] = $ts - EXPIRED_BEFORE for 0 .. SEARCH_INTERVAL - 1;
    }
    write_atomically('Custom.Ads', join '', map { sprintf("%5d %8X %8X %3d %10d\n", $_, @{$ads[$_]}) } 0 .. ADS - 1);
    my $log = open_log();
    truncate($log, 0) or fail(500, "post.log: $!\n");
    sysseek($log, 0, SEEK_SET);
    syswrite($log, sprintf("%10d\n", 0));
    $log->sync;
}

# --- ad selection (TUX's find_ad) ------------------------------------------------------

sub cad_cookie {
    my ($user, $last_ad) = @_;
    my $dem;
    if ($user >= 10000 && open(my $u, '<:raw', "$data/User.Personality")) {
        my $rec = '';
        sysseek($u, ($user - 10000) * USER_RECORD, SEEK_SET) && sysread($u, $rec, USER_RECORD);
        $dem = hex((split ' ', $rec)[1]) if $rec =~ /^\s*\d+\s+[0-9A-F]+\n$/;
    }
    my @ads;
    if (defined $dem && open(my $a, '<', "$data/Custom.Ads")) {
        @ads = map { [(split)[1 .. 4]] } <$a>;
    }
    return (undef, 'found_cookie=Ad_id=-1&Ad_weight=0&Expired=1') unless @ads == ADS;
    my ($ad, $w) = ($last_ad % ADS, 0);
    for my $step (1 .. ADS) {
        $ad = ($last_ad + $step) % ADS;
        my ($d, $weights) = ($dem & hex($ads[$ad][0]), hex($ads[$ad][1]));
        $w = 0;
        $w += ($weights >> 16) & 0xF if $d & 0x30000000;
        $w += ($weights >> 12) & 0xF if $d & 0x0F000000;
        $w += ($weights >> 8) & 0xF if $d & 0x00F00000;
        $w += ($weights >> 4) & 0xF if $d & 0x000FFC00;
        $w += $weights & 0xF if $d & 0x000003FF;
        last if $w >= $ads[$ad][2];
    }
    my $expired = time() > $ads[$ad][3] ? 1 : 0;
    return ($ad, "found_cookie=Ad_id=$ad&Ad_weight=$w&Expired=$expired");
}

# --- the post log -----------------------------------------------------------------------

sub open_log {
    sysopen(my $log, "$data/post.log", O_RDWR | O_CREAT) or fail(500, "post.log: $!\n");
    binmode $log;
    flock($log, LOCK_EX) or fail(500, "post.log: $!\n");
    return $log;
}

sub form_decode {
    my $s = shift;
    $s =~ tr/+/ /;
    $s =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge;
    return $s;
}

sub post {
    my $len = $ENV{CONTENT_LENGTH} // 0;
    fail(413, "request body refused\n") if $len > 4096;
    my $body = '';
    while (length($body) < $len) {
        my $n = read(STDIN, $body, $len - length($body), length($body));
        last unless $n;
    }
    my %f = map { my ($k, $v) = split /=/, $_, 2; ($k, form_decode($v // '')) } split /&/, $body;
    for (qw(urlroot dir class num client)) {
        fail(400, "a POST needs urlroot, dir, class, num and client\n") unless defined $f{$_};
    }
    fail(400, "a POST needs urlroot, dir, class, num and client\n")
      unless $f{dir} =~ /^\d{1,5}$/ && $f{class} =~ /^[0-3]$/ && $f{num} =~ /^[0-8]$/
      && $f{client} =~ /^\d+$/;
    my ($user) = my_cookie() or fail(400, "a POST needs the my_cookie cookie\n");
    my $file = read_object($f{dir}, $f{class}, $f{num});
    my $name = sprintf('%sdir%05d/class%d_%d', $f{urlroot}, $f{dir}, $f{class}, $f{num});
    $name =~ s/[^\x00-\x7f]//g;
    my $log = open_log();
    my $size = -s $log;
    my $count = $size >= HEADER ? int(($size - HEADER) / RECORD) : 0;
    my $recno = $count + 1;
    my $rec = sprintf("%10d %10d %10d %5d %2d %2d %10d %-60.60s %10d %10d\n",
        $recno, time(), $$, $f{dir}, $f{class}, $f{num}, $f{client}, $name, $$, $user);
    sysseek($log, HEADER + $count * RECORD, SEEK_SET);
    syswrite($log, $rec) == RECORD or fail(500, "the post log could not be written\n");
    sysseek($log, 0, SEEK_SET);
    syswrite($log, sprintf("%10d\n", $recno));
    # On disk before the reply: a crash loses no acknowledged record.
    $log->sync or fail(500, "the post log could not be written\n");
    close($log);
    framed($file, "Set-Cookie: my_cookie=$user");
}

# --- dispatch ---------------------------------------------------------------------------

if ($method eq 'POST') {
    post();
} elsif ($method ne 'GET' && $method ne 'HEAD') {
    reply(405, ['Content-Type: text/plain', 'Allow: GET, HEAD, POST'], "GET, HEAD or POST\n");
} elsif ($query =~ m{^command/Reset(?:&(.*))?$}) {
    reset_tables($1 // '');
    framed('');
} elsif ($query eq 'command/Fetch') {
    my $log = open_log();
    local $/;
    my $bytes = <$log> // '';
    my $count = length($bytes) >= HEADER ? int((length($bytes) - HEADER) / RECORD) : 0;
    framed(sprintf("%10d\n", $count) . substr($bytes, HEADER, $count * RECORD));
} elsif ($query =~ m{^command/Finish(?:&.*)?$}) {
    # The kit's manager sends Finish after each point and needs a 2xx.
    framed('');
} elsif ($query =~ m{^command/}) {
    fail(400, "unknown command\n");
}

my ($dir, $class, $num) = object_of_query();
my $file = read_object($dir, $class, $num);
my ($user, $last_ad) = my_cookie();
framed($file) unless defined $user;
my ($ad, $cookie) = cad_cookie($user, $last_ad);
if (defined $ad && ($class == 1 || $class == 2)) {
    my $target = sprintf('dir%05d/class%d_%d', int($ad / 36), int(($ad % 36) / 9), $ad % 9);
    $file =~ s{(<!WEB99CAD><IMG SRC="/file_set/)dirNNNNN/classX_Y}{$1$target}g;
}
framed($file, "Set-Cookie: $cookie");
