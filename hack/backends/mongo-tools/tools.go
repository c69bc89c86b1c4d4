//go:build tools

// Package tools pins the upstream commands this module builds.
package tools

import (
	_ "github.com/mongodb/mongo-tools/mongodump/main"
	_ "github.com/mongodb/mongo-tools/mongoexport/main"
	_ "github.com/mongodb/mongo-tools/mongoimport/main"
	_ "github.com/mongodb/mongo-tools/mongorestore/main"
)
