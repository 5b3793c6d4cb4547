package redistest

import "testing"

func TestParseReplication(t *testing.T) {
	out := []byte("# Replication\r\nrole:master\r\nconnected_slaves:1\r\n" +
		"slave0:ip=127.0.0.1,port=7001,state=online,offset=812,lag=0\r\n" +
		"master_repl_offset:840\r\n")
	master, replicas := parseReplication(out)
	if master != 840 || len(replicas) != 1 || replicas["127.0.0.1:7001"] != 812 {
		t.Fatalf("master %d, replicas %v", master, replicas)
	}
}
