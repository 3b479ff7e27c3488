#!/usr/bin/perl
# fake_peer.pl: a TCP server/client pair standing in for verbs programs, to
# test run_pair.sh itself (perl-base is on every Debian system).
#
#   fake_peer.pl server PORT [hang]  listen on 127.0.0.1:PORT, answer one
#                                    client, exit 0 (hang: never exit)
#   fake_peer.pl client PORT [EXIT]  send a line, print the answer, exit EXIT
use strict;
use warnings;
use IO::Socket::INET;

$| = 1;
my ($mode, $port, $arg) = @ARGV;
die "usage: fake_peer.pl server|client PORT [hang|EXIT]\n" unless defined $port;
if ($mode eq 'server') {
  my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port,
                                Listen => 1, ReuseAddr => 1)
    or die "fake server: listen on $port: $!\n";
  my $c = $s->accept or die "fake server: accept: $!\n";
  my $line = <$c> // '';
  print "fake server got: $line";
  print $c "ack $line";
  close $c;
  sleep 1000 if defined $arg && $arg eq 'hang';
  exit 0;
}
my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port)
  or die "fake client: connect to $port: $!\n";
print $c "hello from fake client\n";
my $answer = <$c> // '';
print "fake client got: $answer";
exit(defined $arg ? $arg : 0);
