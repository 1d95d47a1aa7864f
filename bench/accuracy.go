package bench

import (
	"fmt"
	"math"
	"time"
)

// Ideal is what an exact token bucket admits over elapsed for checks of
// cost 1 when demand always exceeds supply and the bucket starts full:
// burst + rate × elapsed/period.
func Ideal(burst, rate int64, period, elapsed time.Duration) (float64, error) {
	if burst < 0 || rate < 0 || period <= 0 || elapsed < 0 {
		return 0, fmt.Errorf("%w: burst %d rate %d period %v elapsed %v", ErrInput, burst, rate, period, elapsed)
	}
	return float64(burst) + float64(rate)*elapsed.Seconds()/period.Seconds(), nil
}

// Deviation is (admitted − ideal)/ideal in percent: positive is
// over-admission, negative under-admission.
func Deviation(admitted int64, ideal float64) (float64, error) {
	if ideal <= 0 || admitted < 0 {
		return 0, fmt.Errorf("%w: admitted %d ideal %v", ErrInput, admitted, ideal)
	}
	return (float64(admitted) - ideal) / ideal * 100, nil
}

// Fairness is the largest deviation, in percent of the equal share, of any
// gateway's admitted count from total/len(perGateway). 0 is perfectly fair;
// 100 means some gateway got nothing or twice its share.
func Fairness(perGateway []int64) (float64, error) {
	if len(perGateway) == 0 {
		return 0, fmt.Errorf("%w: no gateways", ErrInput)
	}
	var total int64
	for _, v := range perGateway {
		if v < 0 {
			return 0, fmt.Errorf("%w: negative count %d", ErrInput, v)
		}
		total += v
	}
	if total == 0 {
		return 0, fmt.Errorf("%w: nothing admitted", ErrInput)
	}
	equal := float64(total) / float64(len(perGateway))
	worst := 0.0
	for _, v := range perGateway {
		worst = math.Max(worst, math.Abs(float64(v)-equal)/equal*100)
	}
	return worst, nil
}
