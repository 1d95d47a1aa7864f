//go:build weirbugs

package bug

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestSetAndRestore(t *testing.T) {
	restore := Set(TwoPulls, DoublePull)
	if !On(TwoPulls) || !On(DoublePull) || On(FlapLeftovers) {
		t.Errorf("after Set(two-pulls, double-pull): two-pulls %v double-pull %v flap-leftovers %v", On(TwoPulls), On(DoublePull), On(FlapLeftovers))
	}
	inner := Set()
	if On(TwoPulls) {
		t.Error("Set() left two-pulls on")
	}
	inner()
	if !On(TwoPulls) {
		t.Error("restore did not put two-pulls back")
	}
	restore()
	for _, n := range Names() {
		if On(n) && !strings.Contains(os.Getenv(Env), n) {
			t.Errorf("%s on after restore", n)
		}
	}
}

func TestUnknownNamesPanic(t *testing.T) {
	for name, f := range map[string]func(){
		"On":  func() { On("double-pul") },
		"Set": func() { Set("nope") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, strings.Join(Names(), ", ")) {
					t.Errorf("panic %q, want one listing the known switches", msg)
				}
			}()
			f()
		})
	}
}

// TestEnv runs this test binary again with Env set: a comma list turns on
// those named, an unknown name panics with the known ones.
func TestEnv(t *testing.T) {
	if os.Getenv("BUG_TEST_CHILD") != "" {
		for _, n := range Names() {
			if On(n) {
				os.Stdout.WriteString("on " + n + "\n")
			}
		}
		return
	}
	for env, want := range map[string]string{
		"":                                 "",
		" two-pulls,takeback-unreachable ": "on two-pulls\non takeback-unreachable\n",
		"flap-leftovers,nope":              "panic: bug: WEIR_SIM_BUG names an unknown switch \"nope\"; known: " + strings.Join(Names(), ", "),
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnv$", "-test.count=1")
		cmd.Env = append(os.Environ(), "BUG_TEST_CHILD=1", Env+"="+env)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), want) || (want == "" && strings.Contains(string(out), "on ")) {
			t.Errorf("%s=%q: got\n%s\nwant it to hold %q", Env, env, out, want)
		}
	}
}
