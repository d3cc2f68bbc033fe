package main

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// Output formats of kv, txn and status (--output, -o):
//
//	table  for people: text as is, a key or value with a tab, newline,
//	       quote, invalid UTF-8 or other unprintable byte written as a Go
//	       string literal ("a\nb", "\x00\xff"), so that every line is one
//	       entry and no byte is lost;
//	json   for programs: one JSON document, keys and values in base64
//	       (as etcdctl does), since JSON strings cannot hold arbitrary bytes;
//	hex    keys and values in lowercase hexadecimal.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputHex   = "hex"
)

// addOutputFlag registers --output on cmd (persistent) into p.
func addOutputFlag(cmd *cobra.Command, p *string) {
	cmd.PersistentFlags().StringVarP(p, "output", "o", outputTable,
		"output format: table (text, unprintable bytes escaped as Go strings), json (keys and values in base64) or hex")
}

func checkOutput(o string) error {
	switch o {
	case outputTable, outputJSON, outputHex:
		return nil
	}
	return usageErrorf("--output %q: want table, json or hex", o)
}

// printable reports whether b can be printed as is in a table: valid UTF-8
// of printable characters (spaces allowed, no tab or newline), not starting
// with a double quote (which marks an escaped entry).
func printable(b []byte) bool {
	if len(b) > 0 && b[0] == '"' || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r != ' ' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// formatBytes renders a key or value in format o (table or hex; json
// encodes with b64).
func formatBytes(o string, b []byte) string {
	switch o {
	case outputHex:
		return hex.EncodeToString(b)
	case outputJSON:
		return b64(b)
	}
	if printable(b) {
		return string(b)
	}
	return strconv.Quote(string(b))
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// shellQuote quotes b as one shell word: in single quotes when it holds
// printable text, else in bash's $'...' with \xHH escapes.
func shellQuote(b []byte) string {
	if printable(b) && !strings.ContainsAny(string(b), "'\\") {
		return "'" + string(b) + "'"
	}
	var s strings.Builder
	s.WriteString("$'")
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '\'' && c != '\\' {
			s.WriteByte(c)
		} else {
			fmt.Fprintf(&s, "\\x%02x", c)
		}
	}
	s.WriteString("'")
	return s.String()
}
