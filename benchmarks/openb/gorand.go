// Command gorand answers requests for numbers from Go's standard math/rand, one per line.
//
// The FGD paper's simulator draws its arrival order and node preference from Go's
// math/rand; gpuplan's harness (benchmarks/openb/gorand.py) runs this program to get the
// very same numbers instead of reimplementing the generator. It only calls the standard
// library. Requests on stdin, one answer line each on stdout:
//
//	seed S      -> "ok"                  (a new generator seeded with S)
//	int         -> Int()
//	intn N      -> Intn(N)
//	shuffle N   -> the indices 0..N-1 after Shuffle(N, swap), space-separated
//	perm N      -> Perm(N), space-separated
//
// A malformed request answers "error ..." and the program goes on.
package main

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
)

func writeInts(out *bufio.Writer, xs []int) {
	for i, x := range xs {
		if i > 0 {
			out.WriteByte(' ')
		}
		out.WriteString(strconv.Itoa(x))
	}
	out.WriteByte('\n')
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	r := rand.New(rand.NewSource(1))
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		var arg int64
		if len(f) > 1 {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				fmt.Fprintln(out, "error bad argument", f[1])
				out.Flush()
				continue
			}
			arg = v
		}
		needN := f[0] == "intn" || f[0] == "shuffle" || f[0] == "perm"
		if needN && (len(f) < 2 || arg <= 0 || arg > 1<<31-1) {
			fmt.Fprintln(out, "error", f[0], "needs a positive size")
			out.Flush()
			continue
		}
		switch f[0] {
		case "seed":
			r = rand.New(rand.NewSource(arg))
			fmt.Fprintln(out, "ok")
		case "int":
			fmt.Fprintln(out, r.Int())
		case "intn":
			fmt.Fprintln(out, r.Intn(int(arg)))
		case "shuffle":
			p := make([]int, arg)
			for i := range p {
				p[i] = i
			}
			r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
			writeInts(out, p)
		case "perm":
			writeInts(out, r.Perm(int(arg)))
		default:
			fmt.Fprintln(out, "error unknown request", f[0])
		}
		out.Flush()
	}
}
