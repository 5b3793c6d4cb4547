package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The writer goroutine keeps every turn's lines together and in order,
// Flush waits for them, and Close writes what is left.
func TestFileAuditWritesBehindInOrder(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprint("fsync=", fsync), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			fa, err := OpenFileAudit(path, fsync)
			if err != nil {
				t.Fatal(err)
			}
			const writers, turns = 4, 200
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range turns {
						// A turn of two records: index 0 and 1, the same turn id.
						id := fmt.Sprintf("w%d-%d", w, i)
						if err := fa.Append([]Record{{TurnID: id, Index: 0}, {TurnID: id, Index: 1}}); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			fa.Flush()
			recs, err := ReadAuditFile(path)
			if err != nil || len(recs) != 2*writers*turns {
				t.Fatalf("%d records after Flush (%v), want %d", len(recs), err, 2*writers*turns)
			}
			next := map[byte]int{}
			for i := 0; i < len(recs); i += 2 {
				a, b := recs[i], recs[i+1]
				if a.TurnID != b.TurnID || a.Index != 0 || b.Index != 1 {
					t.Fatalf("records %d and %d interleave turns: %+v %+v", i, i+1, a, b)
				}
				var w byte
				var n int
				fmt.Sscanf(a.TurnID, "w%c-%d", &w, &n)
				if n != next[w] {
					t.Fatalf("writer %c's turn %d came before its turn %d", w, n, next[w])
				}
				next[w]++
			}
			if err := fa.Append([]Record{{TurnID: "last"}}); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(fa.Close(), fa.Close()); err != nil {
				t.Fatal(err)
			}
			if recs, _ := ReadAuditFile(path); len(recs) != 2*writers*turns+1 || recs[len(recs)-1].TurnID != "last" {
				t.Fatalf("Close did not write the last turn: %d records", len(recs))
			}
			if err := fa.Append([]Record{{TurnID: "late"}}); !errors.Is(err, os.ErrClosed) {
				t.Fatalf("Append after Close: %v", err)
			}
			fa.Flush() // returns at once once closed
		})
	}
}
