#!/usr/bin/perl
# A small HTTP server on Perl's standard library (Debian's perl-base has it: no package to install).
#   MODE=service    GET / answers $GREETING; GET /health answers ok
#   MODE=website    GET /path serves /srv/public/path (index.html for a directory)
#   MODE=inference  POST /v1/completions {"prompt": "..."} answers {"choices": [{"text": ...}]}
# `server.pl --check` asks GET /health of the server on $PORT: the compose healthcheck.
# Replace it with your own server; keep the healthcheck honest.
use strict;
use warnings;
use IO::Socket::INET;

my $port = $ENV{PORT} || 8080;
my $mode = $ENV{MODE} || "service";

if (@ARGV && $ARGV[0] eq "--check") {
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port, Timeout => 2) or exit 1;
    print $s "GET /health HTTP/1.0\r\n\r\n";
    local $/;
    my $answer = <$s> // "";
    exit($answer =~ /^HTTP\/1\.0 200/ ? 0 : 1);
}

my $server = IO::Socket::INET->new(
    LocalAddr => "0.0.0.0", LocalPort => $port, Listen => 64, ReuseAddr => 1,
) or die "cannot listen on $port: $!\n";
$| = 1;
print "listening on $port ($mode)\n";

sub reply {
    my ($c, $status, $type, $body) = @_;
    print $c "HTTP/1.0 $status\r\nContent-Type: $type\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
}

sub json_string {
    my ($s) = @_;
    $s =~ s/(["\\])/\\$1/g;
    $s =~ s/\n/\\n/g;
    $s =~ s/([\x00-\x1f])/sprintf("\\u%04x", ord($1))/ge;
    return "\"$s\"";
}

while (my $c = $server->accept) {
    # One request at a time: a client that sends less than it said is cut off after 5 s.
    my ($method, $path, $body) = eval {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 5;
        my $line = <$c> // die "closed\n";
        my ($m, $p) = split / /, $line;
        my $length = 0;
        while (my $h = <$c>) {
            last if $h =~ /^\r?\n$/;
            $length = $1 if $h =~ /^Content-Length:\s*(\d+)/i;
        }
        my $b = "";
        read($c, $b, $length > 1_000_000 ? 1_000_000 : $length) if $length;
        alarm 0;
        ($m, $p // "", $b);
    };
    alarm 0;
    unless (defined $method) { close $c; next; }
    if ($path eq "/health") {
        reply($c, "200 OK", "text/plain", "ok\n");
    } elsif ($mode eq "website" && $method eq "GET") {
        # Only plain names under /srv/public: no "..", no hidden files.
        my $rel = $path =~ s/\?.*//r;
        $rel .= "index.html" if $rel =~ m{/$};
        if ($rel =~ m{^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$} && $rel !~ m{/\.} && -f "/srv/public$rel") {
            open(my $f, "<", "/srv/public$rel") or next;
            local $/;
            my $type = $rel =~ /\.html$/ ? "text/html" : $rel =~ /\.css$/ ? "text/css" : "application/octet-stream";
            reply($c, "200 OK", $type, <$f>);
        } else {
            reply($c, "404 Not Found", "text/plain", "not found\n");
        }
    } elsif ($mode eq "inference" && $method eq "POST" && $path eq "/v1/completions") {
        my ($prompt) = $body =~ /"prompt"\s*:\s*"((?:[^"\\]|\\.)*)"/;
        $prompt = "" unless defined $prompt;
        $prompt =~ s/\\n/\n/g;
        $prompt =~ s/\\(["\\\/])/$1/g;
        reply($c, "200 OK", "application/json",
            "{\"object\":\"text_completion\",\"model\":\"echo\",\"choices\":[{\"index\":0,\"text\":"
            . json_string("echo: $prompt") . ",\"finish_reason\":\"stop\"}]}\n");
    } elsif ($mode eq "service" && $method eq "GET") {
        reply($c, "200 OK", "text/plain", ($ENV{GREETING} || "hello from denv") . "\n");
    } else {
        reply($c, "404 Not Found", "text/plain", "not found\n");
    }
    close $c;
}
