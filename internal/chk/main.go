package main

import (
	_ "github.com/buraksezer/consistent"
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.uber.org/goleak"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
)

func main() {}
